#include "ingest/recorder.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <poll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/text.h"
#include "eacgm/abi/events.h"
#include "ingest/cgroup.h"
#include "ingest/decode.h"

namespace eacgm {

static constexpr size_t kBatch = 4096;

Recorder::Recorder(Probes &probes, System &system, RecordSource &source, Sink &out, PythonTracer *python)
	: probes_(probes), system_(system), source_(source), out_(out), symbolizer_(system.proc_root()), table_(system),
	  python_(python)
{}

void Recorder::open() { issues_.emplace(probes_.specs().probes); }

void Recorder::warn_once(const std::string &message)
{
	if (warned_.insert(message).second)
		warnings_.push_back(message);
}

Process &Recorder::process(uint32_t pid, UniqueFd pidfd)
{
	bool created = false;
	Process &p = table_.get(pid, std::move(pidfd), &created);
	if (created) {
		symbolizer_.snapshot(pid);
		watch_python(pid);
		for (auto &w : table_.take_warnings())
			warn_once(w);
	}
	return p;
}

void Recorder::add_root(uint32_t pid, uint32_t ppid, uint64_t start_ns, UniqueFd pidfd)
{
	Process &p = process(pid, std::move(pidfd));
	if (ppid)
		p.ppid = ppid; // else as /proc says
	p.start_ns = start_ns;
}

void Recorder::set_exit(uint32_t pid, int exit_code, uint64_t end_ns)
{
	process(pid);
	table_.set_exit(pid, exit_code, end_ns);
}

void Recorder::span(const eacgm_span_event &e)
{
	const auto &specs = probes_.specs();
	if (e.spec_id >= specs.probes.size())
		return;
	if (discover_ && excluded_.count(e.tgid)) {
		filtered_++;
		return;
	}
	// A call of a process handed on as ended (serve), read late: stored,
	// without bringing it back.
	// Made known after this round's records: reading /proc, its maps and
	// its interpreter here would hold up every record behind this one.
	if (!table_.known(e.tgid) && !table_.ended_call(e.tgid, e.start_ns))
		unseen_.insert(e.tgid);
	table_.note_thread(e.tgid, e.tid, e.start_ns);
	// Decoded at flush, after this round's process events: a forked child's
	// spans can be read before the fork record that says whose maps it has.
	pending_.push_back(e);
	spans_seen_++;
	if (e.spec_id >= spans_per_spec_.size())
		spans_per_spec_.resize(specs.probes.size());
	spans_per_spec_[e.spec_id]++;
}

// A process runs Python once it maps an interpreter: at start, or after the
// dynamic linker loaded libpython. Registered once; an exec starts afresh.
void Recorder::watch_python(uint32_t pid)
{
	if (!python_ || python_->processes().count(pid))
		return;
	auto r = python_->add_process(pid);
	// A process that is already gone has nothing left to say.
	if (!r && system_.exists(pid))
		warn_once(r.error().message);
	for (auto &w : python_->take_warnings())
		warn_once(w);
}

void Recorder::py(const eacgm_py_stack_event &e, uint32_t n)
{
	if (e.kind == EACGM_PY_SPAN) {
		// Named after this round's records (read_round), within
		// milliseconds of the walk, not when the span ends: by then a short
		// program may be finalising and freeing the code objects (its
		// module body's first).
		call_stacks_.push_back({e.id, e.tgid, e.flags, uint32_t(call_frames_.size()), n});
		call_frames_.insert(call_frames_.end(), e.frames, e.frames + n);
		return;
	}
	samples_read_++;
	pending_samples_.push_back(
		{e.ts_ns, e.tgid, e.tid, e.flags, std::vector<eacgm_py_frame>(e.frames, e.frames + n)});
}

// The cache holds while the resolver trusts what it resolved: past that a
// code object at the same address may be another, and is looked at anew.
void Recorder::retire_stack_cache()
{
	uint64_t now = mono_ns();
	if (now - stack_cache_since_ns_ < PythonResolver::kTrustNs && stack_cache_.size() < 65536)
		return;
	fold_cached_samples();
	stack_cache_.clear();
	stack_cache_since_ns_ = now;
}

void Recorder::fold_cached_samples()
{
	for (auto &[key, rs] : stack_cache_) {
		if (!rs.samples)
			continue;
		uint32_t pid;
		memcpy(&pid, key.data(), sizeof pid); // the key starts with the pid
		// Known: a stack resolves only for a process watched as Python.
		const Process *p = table_.find(pid);
		std::string line = p ? p->comm : "";
		for (auto f = (*rs.frames)->rbegin(); f != (*rs.frames)->rend(); ++f)
			line += ";" + f->qualname + " (" + f->filename.substr(f->filename.rfind('/') + 1) + ":" +
				std::to_string(f->first_line) + ")";
		folded_[line] += std::exchange(rs.samples, 0);
	}
}

Recorder::ResolvedStack &Recorder::resolved(uint32_t pid, const eacgm_py_frame *frames, uint32_t n, bool partial)
{
	// The key is built in a buffer kept between calls and looked up as a
	// view: a hit, which nearly every walk is, allocates nothing.
	std::string &key = stack_key_;
	key.resize(sizeof pid + 1 + n * sizeof *frames);
	memcpy(key.data(), &pid, sizeof pid);
	key[sizeof pid] = partial;
	memcpy(key.data() + sizeof pid + 1, frames, n * sizeof *frames);
	auto it = stack_cache_.find(std::string_view(key));
	if (it == stack_cache_.end()) {
		it = stack_cache_.emplace(key, ResolvedStack{}).first;
		auto f = resolve_stack(pid, frames, n, partial);
		if (f) {
			it->second.shown = PyStack(format_py_stack(*f));
			it->second.frames = SharedFrames(std::move(*f));
		}
	} else if (!it->second.frames && !partial) {
		py_unresolved_++; // counted per sample, as when each was resolved
	}
	return it->second;
}

std::optional<std::vector<PyFrame>> Recorder::resolve_stack(uint32_t pid, const eacgm_py_frame *frames, uint32_t n,
							    bool partial)
{
	auto proc = python_->processes().find(pid);
	if (proc == python_->processes().end())
		return std::nullopt;
	const PyOffsets *o = &proc->second.offsets;
	std::vector<PyFrame> out;
	for (uint32_t i = 0; i < n; i++) {
		auto f = resolver_.resolve(pid, *o, frames[i].code, frames[i].instr, frames[i].name, frames[i].file);
		if (!f) {
			// Past a module's top-level code there is no more Python: a
			// frame there is a stale link (seen on 3.11's outermost entry
			// frame), cut off. Anywhere else the stack is dropped, counted:
			// mostly code objects freed before we looked (a module body once
			// its import is done), and a stack with a hole would put time in
			// the wrong function.
			if (!out.empty() && out.back().qualname == "<module>")
				return out;
			// The stack behind a call may show its inner frames, marked cut.
			if (partial && !out.empty()) {
				out.push_back({"...", "", 0, 0});
				return out;
			}
			py_unresolved_++;
			return std::nullopt;
		}
		out.push_back({f->qualname, f->filename, f->line, f->first_line});
	}
	return out;
}

bool Recorder::add_eval_entry(const Span &s, const eacgm_span_event &e)
{
	auto proc = python_->processes().find(s.pid);
	if (proc == python_->processes().end())
		return false;
	// The function entered, from the frame it was given (args: code, code_name).
	auto f = resolver_.resolve(s.pid, proc->second.offsets, e.args[0], 0, e.args[1]);
	if (!f)
		return false;
	calls_[{s.pid, s.tid}].push_back(
		{s.start_ns, s.start_ns + s.dur_ns, {f->qualname, f->filename, f->first_line, f->first_line}});
	return true;
}

// The kernel's exit_code is a wait status: the shell's number for it.
static int exit_status(int32_t code)
{
	if ((code & 0x7f) == 0)
		return (code >> 8) & 0xff;
	return 128 + (code & 0x7f);
}

void Recorder::handle_proc(const eacgm_proc_event &e)
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
			p.comm = std::string(e.comm, strnlen(e.comm, sizeof(e.comm)));
		if (const Process *parent = table_.find(e.ppid); p.cmdline.empty() && parent)
			p.cmdline = parent->cmdline;
		break;
	}
	case EACGM_PROC_EXEC: {
		Process &p = process(e.tgid);
		p.comm = std::string(e.comm, strnlen(e.comm, sizeof(e.comm)));
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
		table_.exit_record(e.tgid, exit_status(e.exit_code), e.ts_ns);
		probes_.forget(e.tgid);
		break;
	}
	for (auto &w : probes_.take_warnings())
		warn_once(w);
}

// After an exec or dlopen: probes for what the process maps now, the maps
// kept for symbols, and the interpreter found if it just loaded one.
void Recorder::rescan_processes()
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
		symbolizer_.adopt(pid, std::move(maps).value());
		if (scan.interpreter)
			watch_python(pid);
	}
	for (auto &w : probes_.take_warnings())
		warn_once(w);
}

// New processes, and renamed ones, to the sinks: the metrics label what a
// process does by its name and where it runs.
Result<void> Recorder::announce() { return table_.announce(out_); }

// serve: a record about a process the table does not hold. True when it
// is handled here.
bool Recorder::discover_proc(const eacgm_proc_event &e)
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

// serve: how long a forked child's records wait for its parent's verdict,
// the calls of a process gone before it was judged for a fork record, and
// an exit read before any call of its process for those calls.
static constexpr uint64_t kForkWaitNs = 1'000'000'000;

// serve: a process known from its exit record, with what /proc still says of
// it (a zombie), else with what the record says.
void Recorder::keep_ended(const eacgm_proc_event &e)
{
	if (system_.exists(e.tgid)) {
		process(e.tgid);
		table_.exit_record(e.tgid, exit_status(e.exit_code), e.ts_ns);
		return;
	}
	Process p;
	p.pid = e.tgid;
	p.comm = std::string(e.comm, strnlen(e.comm, sizeof(e.comm)));
	p.exit_code = exit_status(e.exit_code);
	p.end_ns = e.ts_ns;
	table_.add_ended(std::move(p));
}

// serve: the forks (and what followed) of parents not judged when they were
// read, once the parents are: a child of an excluded parent is excluded, of
// an adopted one traced. The parent's first calls can be read a round after
// the fork (another ring): a child waits for them up to a second (`all`: the
// end), then is judged on its own. A child judged on its own once it has
// exited would count as traced whatever its parent was.
void Recorder::resolve_forks(bool all)
{
	if (held_.empty())
		return;
	uint64_t now = mono_ns();
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

void Recorder::adopt_unseen()
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
	uint64_t now = mono_ns();
	std::erase_if(early_exits_, [&](const eacgm_proc_event &e) { return now > e.ts_ns + kForkWaitNs; });
}

bool Recorder::adopt(uint32_t pid)
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
			warn_once(r.error().message);
	}
	process(pid);
	return true;
}

static bool is_interpreter(const std::string &path)
{
	std::string base = path.substr(path.rfind('/') + 1);
	return base.rfind("python", 0) == 0 || base.rfind("libpython", 0) == 0;
}

// serve: a process that exec'd or loaded a library is adopted once it maps
// what the specs trace or an interpreter; until then it costs nothing more.
void Recorder::judge_candidates()
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
			    (probes_.wanted(m.path) || (python_ && is_interpreter(m.path)))) {
				traced = true;
				break;
			}
		if (traced && adopt(pid))
			rescan_.insert(pid);
	}
}

// serve: an exited process is handed on whole (its end and exit code, its
// threads) and forgotten, with everything kept about it.
Result<void> Recorder::retire_exited()
{
	auto gone = table_.retire(out_, mono_ns());
	if (!gone)
		return gone.error();
	for (uint32_t pid : *gone) {
		symbolizer_.forget(pid);
		probes_.forget(pid);
		if (python_)
			python_->forget(pid);
	}
	return {};
}

// serve: the filters' verdicts on processes that have exited since (their
// exits are not reported: they were never tracked), and the ended
// processes' ends once their last calls must have been read.
void Recorder::sweep_excluded()
{
	auto now = std::chrono::steady_clock::now();
	if (now - last_sweep_ < std::chrono::seconds(10))
		return;
	last_sweep_ = now;
	table_.sweep(mono_ns());
	for (auto it = excluded_.begin(); it != excluded_.end();)
		if (!system_.exists(*it))
			it = excluded_.erase(it);
		else
			++it;
}

std::vector<std::string> Recorder::take_notes() { return std::exchange(notes_, {}); }

Result<int> Recorder::poll(int timeout_ms)
{
	// The BPF side wakes us only when a buffer fills up (a wakeup per record
	// would cost more than the probe), so read whatever is there after each
	// wait. A traced process's exit wakes us too (its pidfd).
	pollfd fds[2] = {{source_.fd(), POLLIN, 0}, {system_.exits_fd(), POLLIN, 0}};
	if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR)
		return make_error(std::string("waiting for events failed: ") + std::strerror(errno));
	auto n = read_round();
	if (!n)
		return n.error();
	adopt_unseen();
	judge_candidates();
	resolve_forks(false);
	rescan_processes();
	// After the records: an exit the kernel reported there (with its code and
	// time) is already handled; the kernel writes it before the pidfd wakes.
	table_.end_exited(mono_ns());
	if (auto r = announce(); !r)
		return r.error();
	uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	if (auto r = flush(); !r)
		return r.error();
	handling_cpu_ns_ += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
	if (auto r = retire_exited(); !r)
		return r.error();
	sweep_excluded();
	// serve: the loss counts as they stand, once a second (record's are
	// written once, at the end).
	if (discover_ && std::chrono::steady_clock::now() - last_drops_ > std::chrono::seconds(1)) {
		last_drops_ = std::chrono::steady_clock::now();
		if (auto r = out_.drops(drops()); !r)
			return r.error();
	}
	return *n;
}

// One read of the source. Its callbacks only copy; then the round's process
// records are handled in their order, its threads named and the Python
// stacks behind its calls named, before any span of it is decoded (flush).
// The records' reading and the stacks' naming count as the budget's cost of
// a record; the process handling does not (nor looking for processes).
Result<int> Recorder::read_round()
{
	uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	auto n = source_.consume(*this);
	if (!n)
		return n.error();
	records_read_ += static_cast<uint64_t>(*n);
	handling_cpu_ns_ += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
	for (const eacgm_proc_event &e : std::exchange(procs_, {}))
		handle_proc(e);
	table_.name_threads();
	cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (const CallStack &c : call_stacks_)
		span_stacks_[c.id] = {c.flags, resolved(c.pid, call_frames_.data() + c.first, c.n, true)};
	call_stacks_.clear();
	call_frames_.clear();
	handling_cpu_ns_ += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
	return n;
}

Result<void> Recorder::drain()
{
	if (auto n = read_round(); !n)
		return n.error();
	adopt_unseen();
	resolve_forks(true);
	rescan_processes();
	return flush(true);
}

// serve: whether a call of a process not judged yet waits for a later
// round: the process is a child whose parent's verdict decides, or it is
// gone and a fork record read later (another ring) may still say whose
// child it was (up to kForkWaitNs after the call; force: never).
bool Recorder::awaits_verdict(const eacgm_span_event &e, bool force, uint64_t now_ns) const
{
	if (held_pids_.count(e.tgid))
		return true;
	return !force && !table_.known(e.tgid) && !table_.ended_call(e.tgid, e.start_ns) &&
		now_ns < e.start_ns + e.dur_ns + kForkWaitNs;
}

// Whether a probe's calls may stay typed to the sinks: no joiner changes
// or holds them (the NCCL layer's communicators, the issue linker, the
// Python layer's entries), so that their Spans are made only where a sink
// reads Spans, and the store keeps them without one. Worked out once per
// probe; probes are added as libraries load.
bool Recorder::stays_typed(uint32_t spec_id)
{
	const auto &specs = probes_.specs();
	if (typed_ok_.size() != specs.probes.size()) {
		typed_ok_.resize(specs.probes.size());
		for (size_t i = 0; i < specs.probes.size(); i++) {
			const ProbeSpec &p = specs.probes[i];
			typed_ok_[i] = p.layer != "nccl" && p.layer != "python" && !(issues_ && issues_->involves(p));
		}
	}
	return typed_ok_[spec_id];
}

// The Python stack a call was made under (its record's py_stack), shown
// with it; the functions of that stack join the samples at its start and
// end. Empty: none, or a thread without Python frames.
PyStack Recorder::take_stack(const eacgm_span_event &e)
{
	auto stack = e.py_stack ? span_stacks_.find(e.py_stack) : span_stacks_.end();
	if (stack == span_stacks_.end())
		return {};
	PyStack shown;
	auto &[flags, rs] = stack->second;
	// A thread started from C (a torch autograd or CUDA worker,
	// _thread.start_new_thread of a C function) has a thread state but no
	// Python frames: its call has no stack.
	if (rs.frames && !(*rs.frames)->empty()) {
		const SharedFrames &frames = *rs.frames;
		shown = rs.shown;
		// The functions that made the call contain it: they join the
		// samples at its start and end (a cut or truncated stack would
		// mislead them: it stays out).
		if (frames->back().qualname != "..." && !(flags & EACGM_PY_TRUNCATED)) {
			add_sample(e.tgid, e.tid, {e.start_ns, frames, false, false});
			add_sample(e.tgid, e.tid, {e.start_ns + e.dur_ns, frames, false, false});
		}
	}
	span_stacks_.erase(stack);
	return shown;
}

// One span record: typed to the batch where no joiner needs it (most
// calls), else as a Span through the joiners.
void Recorder::decode(const eacgm_span_event &e)
{
	const auto &specs = probes_.specs();
	const ProbeSpec &spec = specs.probes[e.spec_id];
	if (raw_dump_)
		raw_dump_->span(e);
	TypedSpan t = decode_typed(e, spec, specs, &symbolizer_, names_);
	// A call seen in a burst of a throttled probe stands for those its
	// probe was detached for (--overhead-budget).
	t.weight = budget_.weight(e.spec_id, e.start_ns);
	if (stays_typed(e.spec_id)) {
		typed_.specs = &specs, typed_.names = &names_, typed_.tensors = tensors_;
		typed_.push_back(t, take_stack(e));
		return;
	}
	decoded_.push_back(render_span(t, spec, specs, names_, tensors_));
	Span &s = decoded_.back();
	nccl_.observe(s);
	if (python_ && s.layer == "python" && s.name == kEvalEntryFunction) {
		if (!add_eval_entry(s, e))
			py_entries_lost_++;
		decoded_.pop_back(); // it lives on as a Python function span
		return;
	}
	s.py_stack = take_stack(e);
	// Held by the linker until the call that issued its work is read.
	if (issues_ && !issues_->see(s, spec.issues))
		decoded_.pop_back();
}

Result<void> Recorder::flush(bool force)
{
	const uint64_t now_ns = discover_ && !pending_.empty() ? mono_ns() : 0;
	{
		for (size_t k = 0; k < pending_.size(); k++) {
			const eacgm_span_event &e = pending_[k];
			if (discover_ && excluded_.count(e.tgid)) {
				filtered_++; // read before its process was judged
				continue;
			}
			if (discover_ && awaits_verdict(e, force, now_ns)) {
				held_spans_.push_back(e);
				continue;
			}
			decode(e);
		}
	}
	pending_.swap(held_spans_); // next round's, first
	held_spans_.clear();
	// Decoding and Python names cannot wait (the process may exit); the
	// store can: a transaction per wakeup would cost more than the tracing.
	auto now = std::chrono::steady_clock::now();
	if (force || decoded_.size() + typed_.size() >= kBatch || now - last_store_ > std::chrono::milliseconds(200)) {
		last_store_ = now;
		if (issues_)
			issues_->release(decoded_, mono_ns(), force);
		SpanBatch batch{SpanBatch::calls, std::move(decoded_), {}, std::move(typed_)};
		auto r = out_.write(batch);
		decoded_ = std::move(batch.spans); // its capacity, for the next batch
		decoded_.clear();
		typed_ = std::move(batch.typed);
		typed_.clear();
		if (!r)
			return r;
	}
	for (auto &raw : pending_samples_) {
		ResolvedStack &rs = resolved(raw.pid, raw.frames.data(), raw.frames.size(), false);
		if (!rs.frames || (*rs.frames)->empty())
			continue;
		rs.samples += fold_;
		add_sample(
			raw.pid, raw.tid,
			{raw.ts, *rs.frames, (raw.flags & EACGM_PY_TRUNCATED) != 0, true, budget_.period_at(raw.ts)});
	}
	pending_samples_.clear();
	retire_stack_cache();
	if (stream_python_ && (force || now - last_py_fold_ > std::chrono::seconds(1))) {
		last_py_fold_ = now;
		return fold_python(false);
	}
	return {};
}

void Recorder::add_sample(uint32_t pid, uint32_t tid, PyStackSample smp)
{
	if (!stream_python_) {
		samples_[{pid, tid}].push_back(std::move(smp));
		return;
	}
	auto [it, fresh] = py_threads_.try_emplace({pid, tid}, PyThread{{}, SampledSpans(pid, tid)});
	if (fresh)
		table_.note_thread(pid, tid, smp.ts_ns);
	it->second.pending.push_back(std::move(smp));
}

// Samples come out of order by up to the length of a traced call (a torch
// call's start is read when it returns) and the read's latency; those older
// than this go in in time order (a later one still comes in: SampledSpans
// places it where it can).
static constexpr uint64_t kPyReorderNs = 2'000'000'000;

Result<void> Recorder::fold_python(bool all)
{
	uint64_t before = all ? UINT64_MAX : mono_ns() - kPyReorderNs;
	auto by_time = [](const PyStackSample &a, const PyStackSample &b) { return a.ts_ns < b.ts_ns; };
	std::vector<Span> spans;
	for (auto it = py_threads_.begin(); it != py_threads_.end();) {
		PyThread &t = it->second;
		std::stable_sort(t.pending.begin(), t.pending.end(), by_time);
		auto end = std::upper_bound(t.pending.begin(), t.pending.end(), before,
					    [](uint64_t ts, const PyStackSample &s) { return ts < s.ts_ns; });
		for (auto p = t.pending.begin(); p != end; ++p)
			t.spans.add(*p);
		t.pending.erase(t.pending.begin(), end);
		// A thread of a process that has exited, with nothing left to
		// place, is done: its state goes (a node agent sees thousands of
		// short-lived threads come and go).
		bool done = all || (t.pending.empty() && !live(it->first.first));
		for (Span &s : done ? t.spans.finish() : t.spans.take())
			spans.push_back(std::move(s));
		if (!done) {
			++it;
			continue;
		}
		py_late_ += t.spans.late();
		it = py_threads_.erase(it);
	}
	SpanBatch batch{SpanBatch::sampled, std::move(spans), {}};
	return out_.write(batch);
}

// Python function spans: the rest of those made as the samples came, or
// all of them, from each thread's samples in time order.
Result<void> Recorder::finish_python()
{
	if (stream_python_)
		return fold_python(true);
	for (auto &[key, calls] : calls_)
		samples_[key]; // a thread with calls and no samples
	for (auto &[key, samples] : samples_) {
		std::stable_sort(samples.begin(), samples.end(),
				 [](const PyStackSample &a, const PyStackSample &b) { return a.ts_ns < b.ts_ns; });
		table_.note_thread(key.first, key.second, samples.empty() ? 0 : samples.front().ts_ns);
		auto calls = calls_.find(key);
		SpanBatch batch{SpanBatch::sampled,
				python_function_spans(key.first, key.second, samples,
						      calls == calls_.end() ? std::vector<PyCall>{} : calls->second,
						      &py_calls_contradicted_),
				{}};
		if (auto r = out_.write(batch); !r)
			return r;
	}
	return {};
}

Result<void> Recorder::finish()
{
	if (auto r = drain(); !r)
		return r;
	// The Python spans first: their threads are noted as they are made.
	if (auto r = finish_python(); !r)
		return r;
	if (auto r = table_.finish(out_); !r)
		return r;
	if (raw_dump_)
		if (auto r = raw_dump_->close(probes_.specs()); !r)
			return r;
	return out_.drops(drops());
}

std::vector<Drop> Recorder::drops() const
{
	auto c = probes_.counters();
	std::vector<Drop> drops = {
		{"uprobe", "ring_buffer_full", c[EACGM_CNT_RINGBUF_FULL]},
		{"uprobe", "depth_overflow", c[EACGM_CNT_DEPTH_OVERFLOW]},
		{"uprobe", "unpaired_entry", c[EACGM_CNT_UNPAIRED]},
		{"uprobe", "thread_table_full", c[EACGM_CNT_NO_STATE]},
		{"uprobe", "exited_in_call", c[EACGM_CNT_EXITED_IN_CALL]},
	};
	if (python_) {
		auto p = python_->counters();
		drops.push_back({"python", "ring_buffer_full", p[EACGM_PY_CNT_RINGBUF_FULL]});
		drops.push_back({"python", "unreadable_stack", p[EACGM_PY_CNT_READ_FAILED]});
		drops.push_back({"python", "unresolved_stack", py_unresolved_});
		drops.push_back({"python", "unresolved_entry", py_entries_lost_});
		drops.push_back({"python", "contradicted_call", py_calls_contradicted_});
		drops.push_back({"python", "late_sample", py_late_});
	}
	return drops;
}

std::vector<std::string> Recorder::take_warnings() { return std::exchange(warnings_, {}); }

std::string Recorder::folded_stacks()
{
	fold_cached_samples();
	std::string out;
	for (auto &[stack, n] : folded_)
		out += stack + " " + std::to_string(n) + "\n";
	return out;
}

} // namespace eacgm
