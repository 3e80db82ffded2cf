// SPDX-License-Identifier: Apache-2.0
// eacgm record: sets up the probes, runs or attaches to the target, streams
// events into the store until every traced process has exited, then writes
// the trace and prints the summary.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <iostream>
#include <limits.h>
#include <optional>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/pipeline.h"
#include "app/privileges.h"
#include "app/target.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/text.h"
#include "export/clickhouse.h"
#include "export/pftrace.h"
#include "probe/pid_watch.h"
#include "sinks/clickhouse.h"
#include "sinks/store.h"
#include "store/store.h"

namespace eacgm {

namespace {

std::atomic<int> g_interrupts{0};
// The launched command, to pass on a signal that only eacgm received.
std::atomic<pid_t> g_child{0};
// Files to remove if a second Ctrl-C abandons the recording (async-signal-safe unlink).
char g_partial[5][PATH_MAX];

void on_signal(int sig, siginfo_t *info, void *)
{
	// Ctrl-C at a terminal reaches the whole foreground group, the command
	// included (SI_KERNEL). A signal sent to eacgm alone (kill, timeout, a
	// scheduler) is passed on, so the command does not run on untraced.
	pid_t child = g_child.load();
	if (child > 0 && info && info->si_code != SI_KERNEL)
		kill(child, sig);
	if (g_interrupts.fetch_add(1) >= 1) {
		for (auto &p : g_partial)
			if (p[0])
				unlink(p);
		const char msg[] = "\neacgm: interrupted twice: recording discarded, nothing written\n";
		if (write(2, msg, sizeof(msg) - 1) < 0) {
		}
		_exit(130);
	}
}

// A line of stderr in one write: a wrapper or a test acts on a line the
// moment it sees it (a second Ctrl-C after "interrupted: waiting"), and a
// line written a piece at a time (std::cerr writes each << at once) can be
// cut by what that reader does in between.
void say(const std::string &line) { std::cerr << line; }

std::string default_output()
{
	char buf[64];
	time_t t = time(nullptr);
	strftime(buf, sizeof(buf), "eacgm-%Y%m%d-%H%M%S.db", localtime(&t));
	return buf;
}

std::string trace_path_for(const std::string &db)
{
	std::string stem = db;
	if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".db") == 0)
		stem.resize(stem.size() - 3);
	return stem + ".pftrace";
}

// One `record` run, as steps that each either go on or give the exit code
// to stop with: check the arguments, open the outputs, load the probes,
// start or attach to the target, record until it is done, write it all.
class RecordSession {
public:
	explicit RecordSession(const RecordArgs &a) : a_(a), pipeline_(pipeline_options(a)) {}
	int run();

private:
	using Stop = std::optional<int>; // an exit code: the recording cannot go on
	static PipelineOptions pipeline_options(const RecordArgs &a);
	Stop check_args();
	Stop check_target();
	Stop drop_privileges();
	Stop open_outputs();
	Stop open_clickhouse();
	Stop finish_clickhouse();
	Stop open_probes();
	Stop check_target_alive();
	Stop open_loop();
	Stop launch_command();
	Stop attach_tree();
	Stop yield_to_the_job();
	Stop handle_signals();
	Stop announce_ready();
	void begin();
	Stop record_until_done();
	Stop take_command_exit();
	int finish();
	int keep_recorded(int code);

	const RecordArgs &a_;
	Pipeline pipeline_;
	std::string exe_;  // the command's executable, resolved
	UniqueFd root_fd_; // -p: the process named, pinned by a pidfd
	std::string db_, trace_;
	std::optional<StoreWriter> store_;
	std::optional<StoreSink> store_sink_;
	std::optional<ClickHouseTarget> clickhouse_target_; // --clickhouse
	std::optional<ClickHouseShipper> shipper_;
	std::optional<ClickHouseSink> clickhouse_;
	SinkChain sinks_;
	ElfPrefetch prefetch_; // the target's libraries, read while the BPF objects load
	std::optional<LaunchedCommand> launched_;
	bool command_exited_ = false;
	int exit_code_ = 0;
	std::vector<std::string> capabilities_; // what eacgm kept of root
};

PipelineOptions RecordSession::pipeline_options(const RecordArgs &a)
{
	PipelineOptions o;
	o.reader_nice = getpriority(PRIO_PROCESS, 0); // before yield_to_the_job lowers it
	o.layers = a.layers;
	o.specs = a.specs;
	o.torch_ops = a.torch_ops;
	o.ring_buffer_kb = a.ring_buffer_kb;
	o.sample_hz = a.sample_hz;
	o.python_entries = a.python_entries;
	o.gpu_hz = a.gpu_hz;
	o.host_interval_ms = a.host_interval_ms;
	o.detect = a.detect;
	o.detect_fpr = a.detect_fpr;
	o.overhead_budget_pct = a.overhead_budget_pct;
	o.budget_after_s = a.budget_after_s;
	o.hang_after_s = a.hang_after_s;
	o.flamegraph = !a.flamegraph.empty();
	o.bpf_stats = a.bpf_stats;
	o.raw_dump = a.raw_dump;
	return o;
}

RecordSession::Stop RecordSession::check_args()
{
	if (a_.pid && !a_.command.empty())
		return fail("give either -p PID or -- COMMAND, not both", 2);
	if (!a_.pid && a_.command.empty())
		return fail("nothing to record: give -p PID or -- COMMAND [ARGS...]", 2);
	if (a_.clickhouse.empty() && !a_.clickhouse_cluster.empty())
		return fail("--clickhouse-cluster needs --clickhouse URL: the server whose cluster it names", 2);
	if (!a_.clickhouse.empty()) {
		auto t = parse_clickhouse_url(a_.clickhouse, a_.clickhouse_cluster);
		if (!t)
			return fail("--clickhouse: " + t.error().message, 2);
		clickhouse_target_ = std::move(t.value());
	}
	if (auto stop = pipeline_.check())
		return stop;
	return pipeline_.build_specs();
}

// Before anything is loaded: the command exists, or the process is alive.
// The pidfd taken here is the process from now on, even if its pid is reused.
// The command is forked here, to wait at its gate, so that it keeps the
// privileges it was given when eacgm drops its own.
RecordSession::Stop RecordSession::check_target()
{
	if (!a_.command.empty()) {
		auto r = resolve_command(a_.command[0]);
		if (!r)
			return fail(r.error().message, 127);
		exe_ = r.value();
		auto l = LaunchedCommand::start(a_.command, exe_);
		if (!l)
			return fail(l.error().message);
		launched_.emplace(std::move(l.value()));
	} else {
		auto fd = open_live_process(a_.pid);
		if (!fd)
			return fail(fd.error().message);
		root_fd_ = std::move(fd.value());
	}
	return {};
}

// Before any thread starts (each inherits its creator's capabilities), and
// after the fork (the command keeps its own sets and umask): what tracing
// needs (CAP_KILL among it, which also lets record pass a signal on to a
// command that changed its user), and what record does for the user
// besides: write its outputs wherever root may (CAP_DAC_OVERRIDE).
RecordSession::Stop RecordSession::drop_privileges()
{
	auto kept = keep_tracing_privileges({{CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"}}, a_.bpf_stats);
	if (!kept)
		return fail(kept.error().message);
	capabilities_ = std::move(kept.value());
	prefetch_.start(pipeline_.specs(), a_.command.empty() ? a_.pid : 0, exe_);
	return {};
}

RecordSession::Stop RecordSession::open_outputs()
{
	db_ = a_.output.empty() ? default_output() : a_.output;
	trace_ = a_.perfetto.empty() ? trace_path_for(db_) : a_.perfetto;
	if (auto f = trace_format_of(trace_); !f)
		return fail(f.error().message, 2);
	std::vector<std::string> outputs = {db_, trace_};
	for (auto *extra : {&a_.flamegraph, &a_.ready_file})
		if (!extra->empty())
			outputs.push_back(*extra);
	for (auto &p : outputs)
		if (auto r = check_writable(p); !r)
			return fail(r.error().message, 2);
	// A ready file left by an earlier run must not say this one is ready.
	if (!a_.ready_file.empty())
		unlink(a_.ready_file.c_str());
	auto store = StoreWriter::create(db_);
	if (!store)
		return fail(store.error().message);
	store_.emplace(std::move(store.value()));
	store_->commit_every(kPipelineCommitNs);
	store_sink_.emplace(*store_);
	sinks_.add(&*store_sink_);
	if (auto stop = open_clickhouse())
		return stop;
	// StoreWriter's work file and SQLite's WAL files beside it.
	snprintf(g_partial[0], PATH_MAX, "%s.partial", db_.c_str());
	snprintf(g_partial[2], PATH_MAX, "%s.partial-wal", db_.c_str());
	snprintf(g_partial[3], PATH_MAX, "%s.partial-shm", db_.c_str());
	snprintf(g_partial[4], PATH_MAX, "%s.partial-reserve", db_.c_str()); // StoreWriter's room for a full disk
	snprintf(g_partial[1], PATH_MAX, "%s.tmp.%d", trace_.c_str(), (int)getpid()); // write_file_atomic's
	return {};
}

// --clickhouse: a second sink beside the store. A server that does not
// answer now is worth a warning, not a refusal: rows wait in the shipper's
// queue and are retried (counted as dropped if they never go).
RecordSession::Stop RecordSession::open_clickhouse()
{
	if (!clickhouse_target_)
		return {};
	if (auto r = ClickHouseClient(*clickhouse_target_).query("SELECT 1"); !r)
		std::cerr << "eacgm: warning: " << r.error().message
			  << "; spans are queued for it (up to 64 MB) and retried until 10 s after the end\n";
	shipper_.emplace(*clickhouse_target_, ClickHouseShipper::Options{});
	// Everything it records, as its own store keeps it.
	clickhouse_.emplace(*shipper_, ClickHouseSink::Identity{host_name(), ""},
			    ClickHouseSink::Options{.spans = ClickHouseSink::Spans::all});
	sinks_.add(&*clickhouse_);
	return {};
}

// What is left goes now, for up to 10 s; what cannot go is counted as
// dropped, in the recording's drops and on stderr.
RecordSession::Stop RecordSession::finish_clickhouse()
{
	if (!shipper_)
		return {};
	auto c = shipper_->finish(10); // the sink's last rows were handed over at its finish()
	std::cerr << "clickhouse: " << c.describe(a_.clickhouse) << "\n";
	if (!c.dropped["spans"])
		return {};
	auto drops = pipeline_.loop().drops();
	drops.push_back({"clickhouse", "not shipped", c.dropped["spans"]}); // the recording's own records
	if (auto r = store_->set_drops(drops); !r)
		return fail(r.error().message);
	return {};
}

// -p: the process named exited before any of it was tracked. The children
// it had were handed to another parent at its exit and cannot be found from
// it any more: nothing is left to record, so the attach (seconds of BPF
// loading on a busy node) is abandoned rather than finished.
RecordSession::Stop RecordSession::check_target_alive()
{
	if (!root_fd_ || !pidfd_exited(root_fd_))
		return {};
	return fail("process " + std::to_string(a_.pid) +
		    " exited while eacgm was attaching, before any probe was in place: nothing was recorded");
}

RecordSession::Stop RecordSession::open_probes()
{
	if (auto stop = pipeline_.open_probes(&prefetch_, [this] { return check_target_alive(); }))
		return stop;
	pipeline_.open_collectors();
	return {};
}

RecordSession::Stop RecordSession::open_loop() { return pipeline_.open_loop(sinks_); }

// The command waits at a gate until every probe is in place: nothing it
// does, and no process it starts, is missed.
RecordSession::Stop RecordSession::launch_command()
{
	if (auto r = pipeline_.tracker().track(launched_->pid()); !r)
		return fail(r.error().message);
	pipeline_.loop().add_root(launched_->pid(), getpid(), mono_ns());
	if (auto r = pipeline_.attacher().attach_installed(linked_libraries(exe_)); !r)
		return fail(r.error().message, 2); // the gate closes: the command never runs
	return {};
}

// The process named and every process below it. The kernel side follows
// forks only from a process already tracked, so /proc is walked until a
// walk finds nothing new: a child forked while its parent was being tracked
// is found by the next walk. Each process is watched through a pidfd taken
// before it is tracked, so one that exits meanwhile (reaped or a zombie)
// ends as surely as one that exits later.
RecordSession::Stop RecordSession::attach_tree()
{
	std::set<uint32_t> seen;
	for (bool found = true; found;) {
		found = false;
		for (uint32_t p : process_tree(a_.pid)) {
			if (!seen.insert(p).second)
				continue;
			found = true;
			UniqueFd fd;
			if (p == (uint32_t)a_.pid) {
				fd = std::move(root_fd_);
			} else {
				auto f = open_pidfd(p);
				if (!f)
					return fail(f.error().message);
				if (!*f)
					continue; // gone before it was tracked: nothing of it to record
				fd = std::move(**f);
			}
			if (auto r = pipeline_.tracker().track(p); !r)
				return fail(r.error().message);
			pipeline_.loop().add_root(p, 0, mono_ns(), std::move(fd));
			// A process that exits while it is scanned has nothing left to probe.
			auto r = pipeline_.attacher().scan_process(p);
			if (!r && p == (uint32_t)a_.pid && process_exists(p) && !zombie_exit_status(p))
				return fail(r.error().message, 2);
		}
	}
	if (auto r = pipeline_.attacher().attach_installed({}); !r)
		return fail(r.error().message, 2);
	return {};
}

// After the command is launched: it keeps its own niceness (a process may
// not lower its niceness again without CAP_SYS_NICE, which eacgm dropped).
RecordSession::Stop RecordSession::yield_to_the_job()
{
	if (auto r = lower_priority(a_.nice, pipeline_.kept_priority()); !r)
		return fail(r.error().message);
	return {};
}

// Before the ready line: whoever reads it may signal eacgm at once (a test,
// a wrapper's stop), and that signal must stop the recording cleanly, not
// kill eacgm with the default action. An interrupt taken before the loop
// starts is seen by its first pass.
RecordSession::Stop RecordSession::handle_signals()
{
	if (launched_)
		g_child = launched_->pid();
	struct sigaction sa = {};
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	return {};
}

// Once every probe is in place: one line on stderr and, when asked, the
// ready file (written whole, by rename), for wrappers and tests that must
// not guess when tracing has begun.
RecordSession::Stop RecordSession::announce_ready()
{
	uint64_t now = mono_ns();
	// What happened while attaching (exits included) before counting.
	if (auto n = pipeline_.loop().poll(0); !n)
		return fail(n.error().message);
	size_t probes = pipeline_.attacher().attached().size();
	size_t processes = pipeline_.loop().live_processes();
	// The file first: whoever reads the line may look for the file next.
	if (!a_.ready_file.empty()) {
		nlohmann::json ready = {{"pid", getpid()},
					{"probes", probes},
					{"processes", processes},
					{"mono_ns", now},
					{"output", db_}};
		if (auto r = write_file_atomic(a_.ready_file, ready.dump() + "\n"); !r)
			return fail(r.error().message);
	}
	say("eacgm: recording (" + plural(probes, "probe", "probes") + ", " +
	    plural(processes, "process", "processes") + ")\n");
	if (!launched_ && processes == 0)
		std::cerr << "eacgm: warning: process " << a_.pid
			  << " exited while eacgm was attaching: the recording holds only what it did after its probes "
			     "were in place\n";
	return {};
}

// Says what runs how, writes the recording's meta, then releases the
// command.
void RecordSession::begin()
{
	pipeline_.begin();
	(void)store_->set_meta("command", a_.command.empty() ? "pid " + std::to_string(a_.pid) : join(a_.command, " "));
	(void)store_->set_meta("agent_capabilities", join(capabilities_, ","));
	pipeline_.write_start_meta(*store_);
	// Stopped after its exec, the command is read (one pass over the
	// events: its exec is among them, written before the stop) and let go.
	if (launched_)
		launched_->release([this] { (void)pipeline_.step(0); });
}

// The launched command's exit, once: its own code is the recording's.
RecordSession::Stop RecordSession::take_command_exit()
{
	int status;
	if (!launched_ || command_exited_ || !launched_->poll_exit(status))
		return {};
	// What the command did before it exited, a fork above all, was in the
	// rings before waitpid could see the exit, but perhaps after this
	// round's read: read them once more before its processes are counted,
	// or a child forked just before the exit is not known yet and the
	// recording ends without it.
	if (auto stop = pipeline_.step(0))
		return stop;
	exit_code_ = status;
	command_exited_ = true;
	RecordLoop &rec = pipeline_.loop();
	rec.set_exit(launched_->pid(), status, mono_ns());
	if (size_t left = rec.live_processes())
		std::cerr << "eacgm: the command exited (" << status << "); recording its "
			  << plural(left, "process", "processes") << " still running until they exit (Ctrl-C stops)\n";
	return {};
}

// Until every traced process has exited (the command, the processes it
// started, the processes attached to), or Ctrl-C.
RecordSession::Stop RecordSession::record_until_done()
{
	using clock = std::chrono::steady_clock;
	bool tty = isatty(2);
	auto last_status = clock::now();
	std::optional<clock::time_point> interrupted_at;
	RecordLoop &rec = pipeline_.loop();
	for (;;) {
		// The kernel reports an exit (tracepoint, pidfd) a moment before the
		// process can be reaped, and nothing wakes eacgm then: look again soon.
		bool soon = launched_ && !command_exited_ && !rec.live(launched_->pid());
		if (auto stop = pipeline_.step(pipeline_.poll_timeout_ms(soon)))
			return stop;
		if (auto stop = take_command_exit())
			return stop;
		if (rec.live_processes() == 0 && (!launched_ || command_exited_))
			return {};
		if (g_interrupts.load() && !interrupted_at) {
			interrupted_at = clock::now();
			if (!launched_ || command_exited_)
				return {}; // eacgm alone was asked to stop: the processes go on
			std::ostringstream line;
			line << (tty ? "\r\033[K" : "") << "eacgm: interrupted: waiting up to " << a_.stop_timeout_s
			     << " s (--stop-timeout) for the command to exit; interrupt again to discard the "
				"recording\n";
			say(line.str());
		}
		// After Ctrl-C the launched command got SIGINT too: give it time to
		// finish its last calls, then stop regardless.
		if (interrupted_at &&
		    clock::now() - *interrupted_at > std::chrono::duration<double>(a_.stop_timeout_s)) {
			std::ostringstream line;
			line << (tty ? "\r\033[K" : "") << "eacgm: the command did not exit within "
			     << a_.stop_timeout_s
			     << " s of the interrupt: the recording stops without it (it goes on running, "
				"untraced)\n";
			say(line.str());
			exit_code_ = 130;
			return {};
		}
		if (tty && clock::now() - last_status > std::chrono::seconds(1)) {
			last_status = clock::now();
			fprintf(stderr, "\reacgm: recording: %llu spans, %zu live processes ",
				(unsigned long long)rec.spans_seen(), rec.live_processes());
		}
	}
}

int RecordSession::finish()
{
	pipeline_.write_meta(*store_);
	if (isatty(2))
		fprintf(stderr, "\r\033[K");
	if (auto stop = pipeline_.finish(&*store_))
		return *stop;
	if (auto stop = finish_clickhouse())
		return *stop;
	(void)store_->set_meta("duration_s", std::to_string(pipeline_.attached_s()));
	if (auto r = store_->finish(); !r)
		return fail(r.error().message);
	g_partial[0][0] = 0;

	auto summary = write_trace_and_summary(db_, trace_);
	if (!summary)
		return fail(summary.error().message);
	if (!a_.flamegraph.empty())
		if (auto r = write_file_atomic(a_.flamegraph, pipeline_.loop().folded_stacks()); !r)
			return fail(r.error().message);
	std::cerr << *summary;
	std::cerr << "recording: " << db_ << "\ntrace:     " << trace_ << " (open in ui.perfetto.dev)\n";
	if (!a_.flamegraph.empty())
		std::cerr << "flame graph stacks: " << a_.flamegraph << "\n";
	return exit_code_;
}

int RecordSession::run()
{
	raise_open_file_limit();
	for (auto step : {&RecordSession::check_args, &RecordSession::check_target, &RecordSession::drop_privileges,
			  &RecordSession::open_outputs, &RecordSession::open_probes})
		if (auto stop = (this->*step)())
			return *stop;
	auto start = a_.command.empty() ? &RecordSession::attach_tree : &RecordSession::launch_command;
	for (auto step :
	     {&RecordSession::check_target_alive, &RecordSession::open_loop, start, &RecordSession::yield_to_the_job,
	      &RecordSession::handle_signals, &RecordSession::announce_ready})
		if (auto stop = (this->*step)())
			return *stop;
	begin();
	if (auto stop = record_until_done())
		return keep_recorded(*stop);
	return keep_recorded(finish());
}

// Once the command ran, what was recorded is the operator's: a run that
// fails (its disk full at hour 5) keeps hours 1 to 4 under the output's
// name, marked incomplete, rather than deleting them with the writer.
int RecordSession::keep_recorded(int code)
{
	if (!store_ || !store_->is_open())
		return code;
	std::string why = "eacgm record stopped early: " + last_failure();
	auto kept = store_->keep_incomplete(why);
	for (auto &p : g_partial) // a second Ctrl-C now must not remove it
		p[0] = 0;
	if (!kept)
		return fail(kept.error().message);
	std::cerr << "eacgm: the recording so far is kept in " << *kept
		  << " (every batch written before the failure; its meta 'incomplete' says why, and no trace was "
		     "written)\n";
	return code ? code : 1;
}

} // namespace

int run_record(const RecordArgs &args) { return RecordSession(args).run(); }

} // namespace eacgm
