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
	  python_(python), python_join_(python, table_)
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

void Recorder::py(const eacgm_py_stack_event &e, uint32_t n) { python_join_.record(e, n); }

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
	python_join_.name_call_stacks();
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
		typed_.push_back(t, python_join_.take_stack(e));
		return;
	}
	decoded_.push_back(render_span(t, spec, specs, names_, tensors_));
	Span &s = decoded_.back();
	nccl_.observe(s);
	if (python_ && s.layer == "python" && s.name == kEvalEntryFunction) {
		python_join_.eval_entry(s, e);
		decoded_.pop_back(); // it lives on as a Python function span
		return;
	}
	s.py_stack = python_join_.take_stack(e);
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
	return python_join_.flush(out_, budget_, force);
}

Result<void> Recorder::finish()
{
	if (auto r = drain(); !r)
		return r;
	// The Python spans first: their threads are noted as they are made.
	if (auto r = python_join_.finish(out_); !r)
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
		python_join_.drops(drops);
	}
	return drops;
}

std::vector<std::string> Recorder::take_warnings() { return std::exchange(warnings_, {}); }

} // namespace eacgm
