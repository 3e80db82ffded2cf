// eacgm record: sets up the probes, runs or attaches to the target, streams
// events into the store until every traced process has exited, then writes
// the trace and prints the summary.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <future>
#include <iostream>
#include <limits.h>
#include <optional>
#include <set>
#include <sys/resource.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/overhead.h"
#include "app/target.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/text.h"
#include "common/usage.h"
#include "detect/online.h"
#include "export/perfetto.h"
#include "export/summary.h"
#include "ingest/recorder.h"
#include "layers/collector.h"
#include "layers/gpu.h"
#include "layers/host.h"
#include "layers/python.h"
#include "layers/torch.h"
#include "probe/attacher.h"
#include "probe/pid_watch.h"
#include "probe/prog_stats.h"
#include "probe/spec.h"
#include "store/store.h"

namespace eacgm {

const std::vector<std::string> kAllLayers = {"cuda", "nccl", "torch", "python", "gpu", "host"};
const std::vector<std::string> kSpecLayers = {"cuda", "nccl", "torch"};

Result<SpecSet> torch_ops_spec(const std::vector<std::string> &ops);

namespace {

std::atomic<int> g_interrupts{0};
// The launched command, to pass on a signal that only eacgm received.
std::atomic<pid_t> g_child{0};
// Files to remove if a second Ctrl-C abandons the recording (async-signal-safe unlink).
char g_partial[4][PATH_MAX];

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

int64_t wall_offset_ns() { return int64_t(clock_ns(CLOCK_REALTIME)) - int64_t(mono_ns()); }

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
	return stem + ".trace.json";
}

// Prints the message and gives the exit code to stop with.
int fail(const std::string &msg, int code = 1)
{
	std::cerr << "eacgm: " << msg << "\n";
	return code;
}

// One pidfd per traced process (and one per thousands of short-lived
// ones): the soft limit on open files is raised to the hard one.
void raise_open_file_limit()
{
	rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

// One `record` run, as steps that each either go on or give the exit code
// to stop with: check the arguments, open the outputs, load the probes,
// start or attach to the target, record until it is done, write it all.
class RecordSession {
public:
	explicit RecordSession(const RecordArgs &a) : a_(a) {}
	int run();

private:
	using Stop = std::optional<int>; // an exit code: the recording cannot go on
	bool has(const std::string &layer) const
	{
		return std::find(layers_.begin(), layers_.end(), layer) != layers_.end();
	}
	Stop check_args();
	Stop build_specs();
	Stop check_target();
	Stop open_outputs();
	Stop open_probes();
	Stop check_target_alive();
	void open_collectors();
	Stop open_recorder();
	Stop launch_command();
	Stop attach_tree();
	Stop announce_ready();
	void begin();
	Result<void> collect();
	Stop record_until_done();
	int poll_timeout_ms() const;
	void note_own_cost();
	int finish();

	const RecordArgs &a_;
	std::vector<std::string> layers_;
	SpecSet specs_;
	std::string exe_;  // the command's executable, resolved
	UniqueFd root_fd_; // -p: the process named, pinned by a pidfd
	std::string db_, trace_;
	std::optional<StoreWriter> store_;
	std::unique_ptr<ProcTracker> tracker_;
	std::unique_ptr<PythonTracer> python_;
	std::unique_ptr<SpanEngine> engine_;
	ElfPrefetch prefetch_; // the target's libraries, read while the BPF objects load
	std::optional<Attacher> attacher_;
	std::vector<std::unique_ptr<Collector>> collectors_;
	// The host layer's programs load while the span and Python ones do:
	// verifying and relocating each BPF object takes tens of milliseconds,
	// and start-up is what a user waits for.
	std::future<Result<std::unique_ptr<Collector>>> host_loading_;
	std::optional<detect::OnlineDetector> detector_;
	std::optional<Recorder> recorder_;
	std::optional<OverheadKeeper> budget_;
	std::optional<LaunchedCommand> launched_;
	bool command_exited_ = false;
	int exit_code_ = 0;
	std::chrono::steady_clock::time_point start_;
	SelfUsage usage_at_start_; // eacgm's own CPU when the recording began
	UniqueFd prog_stats_;      // the kernel counts our programs' runs and time while held
	std::vector<Metric> metrics_;
	std::vector<Event> events_;
};

RecordSession::Stop RecordSession::check_args()
{
	if (a_.pid && !a_.command.empty())
		return fail("give either -p PID or -- COMMAND, not both", 2);
	if (!a_.pid && a_.command.empty())
		return fail("nothing to record: give -p PID or -- COMMAND [ARGS...]", 2);
	layers_ = a_.layers.empty() ? kAllLayers : a_.layers;
	for (auto &l : layers_)
		if (std::find(kAllLayers.begin(), kAllLayers.end(), l) == kAllLayers.end())
			return fail("unknown layer '" + l + "'; choose from " + join(kAllLayers), 2);
	if (!a_.torch_ops.empty() && !has("torch"))
		return fail("--torch-ops needs the torch layer; add torch to --layers", 2);
	if (!a_.flamegraph.empty() && !has("python"))
		return fail("--flamegraph needs the python layer; add python to --layers", 2);
	if (auto r = check_bpf_privileges(); !r)
		return fail(r.error().message);
	return {};
}

RecordSession::Stop RecordSession::build_specs()
{
	for (auto &l : kSpecLayers) {
		if (!has(l))
			continue;
		auto s = load_builtin_spec(l);
		if (!s)
			return fail(s.error().message);
		specs_.merge(std::move(s.value()));
	}
	if (!a_.torch_ops.empty()) {
		auto extra = torch_ops_spec(a_.torch_ops);
		if (!extra)
			return fail(extra.error().message, 2);
		specs_.merge(std::move(extra.value()));
	}
	for (auto &f : a_.specs) {
		auto s = load_spec_file(f, true);
		if (!s)
			return fail(s.error().message, 2);
		specs_.merge(std::move(s.value()));
	}
	return {};
}

// Before anything is loaded: the command exists, or the process is alive.
// The pidfd taken here is the process from now on, even if its pid is reused.
RecordSession::Stop RecordSession::check_target()
{
	if (!a_.command.empty()) {
		auto r = resolve_command(a_.command[0]);
		if (!r)
			return fail(r.error().message, 127);
		exe_ = r.value();
	} else {
		auto fd = open_live_process(a_.pid);
		if (!fd)
			return fail(fd.error().message);
		root_fd_ = std::move(fd.value());
	}
	prefetch_.start(specs_, a_.command.empty() ? a_.pid : 0, exe_);
	return {};
}

RecordSession::Stop RecordSession::open_outputs()
{
	db_ = a_.output.empty() ? default_output() : a_.output;
	trace_ = a_.perfetto.empty() ? trace_path_for(db_) : a_.perfetto;
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
	// StoreWriter's work file and SQLite's WAL files beside it.
	snprintf(g_partial[0], PATH_MAX, "%s.partial", db_.c_str());
	snprintf(g_partial[2], PATH_MAX, "%s.partial-wal", db_.c_str());
	snprintf(g_partial[3], PATH_MAX, "%s.partial-shm", db_.c_str());
	snprintf(g_partial[1], PATH_MAX, "%s.tmp.%d", trace_.c_str(), (int)getpid()); // write_file_atomic's
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
	auto tracker = ProcTracker::open(false);
	if (!tracker)
		return fail(tracker.error().message);
	tracker_ = std::move(tracker.value());
	if (auto stop = check_target_alive())
		return stop;
	if (has("host")) {
		HostOptions ho;
		ho.interval_ms = a_.host_interval_ms;
		host_loading_ = std::async(std::launch::async, [fd = tracker_->traced_map_fd(), ho] {
			return open_host_collector(fd, ho);
		});
	}
	SpanEngine::Options eo;
	eo.ring_buffer_bytes = a_.ring_buffer_kb * 1024u;
	// The Python programs verify on a thread while the span engine's do
	// (the engine shares the maps prepare() makes).
	std::future<Result<void>> python_loading;
	if (has("python")) {
		auto p = PythonTracer::prepare(tracker_->traced_map_fd());
		if (!p)
			return fail(p.error().message);
		python_ = std::move(p.value());
		eo.py_procs = bpf_map__fd(python_->procs_map());
		eo.py_tstates = bpf_map__fd(python_->tstates_map());
		eo.py_events = bpf_map__fd(python_->events_map());
		eo.py_counters = bpf_map__fd(python_->counters_map());
		python_loading = std::async(std::launch::async, [this] { return python_->load(a_.sample_hz); });
		if (a_.python_entries != "off")
			specs_.merge(python_->eval_entry_probes(a_.python_entries == "all"));
		if (auto stop = check_target_alive())
			return stop;
	}
	auto engine = SpanEngine::open(eo, tracker_->traced_map_fd());
	if (!engine)
		return fail(engine.error().message, 2);
	engine_ = std::move(engine.value());
	if (python_loading.valid())
		if (auto r = python_loading.get(); !r)
			return fail(r.error().message);
	if (auto stop = check_target_alive())
		return stop;
	attacher_.emplace(*engine_, *tracker_, std::move(specs_));
	attacher_->set_signature_reader(torch_signature_reader(attacher_->specs()));
	attacher_->use_prefetch(&prefetch_);
	if (auto r = attacher_->load_specs(); !r)
		return fail(r.error().message);
	char ld[PATH_MAX];
	if (realpath("/lib64/ld-linux-x86-64.so.2", ld))
		if (auto r = tracker_->watch_dynamic_linker(ld); !r)
			std::cerr << "eacgm: warning: " << r.error().message << "\n";
	return {};
}

// Layers read from user space. One that cannot work here says why once and
// the others go on (a machine without a GPU still has a host).
void RecordSession::open_collectors()
{
	if (has("gpu")) {
		GpuOptions go;
		go.hz = a_.gpu_hz;
		if (auto c = open_gpu_collector(go))
			collectors_.push_back(std::move(c.value()));
		else
			std::cerr << "eacgm: " << c.error().message << "\n";
	}
	if (host_loading_.valid()) {
		if (auto c = host_loading_.get())
			collectors_.push_back(std::move(c.value()));
		else
			std::cerr << "eacgm: host layer unavailable: " << c.error().message << "\n";
	}
}

RecordSession::Stop RecordSession::open_recorder()
{
	recorder_.emplace(*attacher_, *engine_, *tracker_, *store_, python_.get());
	recorder_->set_tensor_formatter(format_tensor);
	if (!a_.flamegraph.empty())
		recorder_->keep_folded_stacks();
	if (python_ && python_->sample_period_ns())
		recorder_->set_sample_period(0, python_->sample_period_ns());
	if (a_.python_entries != "off")
		recorder_->keep_python_samples(); // measured calls reshape the sampled spans
	// Online detection: a model per function, trained on its first calls,
	// refitted in the background; anomalies go to the store as they come.
	if (a_.detect) {
		auto dopt = detect::DetectOptions::always_on();
		dopt.model.fpr = a_.detect_fpr;
		detector_.emplace(dopt);
		recorder_->set_detector(&*detector_);
	}
	if (auto r = recorder_->open(); !r)
		return fail(r.error().message);
	return {};
}

// The command waits at a gate until every probe is in place: nothing it
// does, and no process it starts, is missed.
RecordSession::Stop RecordSession::launch_command()
{
	auto l = LaunchedCommand::start(a_.command, exe_);
	if (!l)
		return fail(l.error().message);
	launched_.emplace(std::move(l.value()));
	if (auto r = tracker_->track(launched_->pid()); !r)
		return fail(r.error().message);
	recorder_->add_root(launched_->pid(), getpid(), mono_ns());
	if (auto r = attacher_->attach_installed(linked_libraries(exe_)); !r)
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
			if (auto r = tracker_->track(p); !r)
				return fail(r.error().message);
			recorder_->add_root(p, 0, mono_ns(), std::move(fd));
			// A process that exits while it is scanned has nothing left to probe.
			auto r = attacher_->scan_process(p);
			if (!r && p == (uint32_t)a_.pid && process_exists(p) && !zombie_exit_status(p))
				return fail(r.error().message, 2);
		}
	}
	if (auto r = attacher_->attach_installed({}); !r)
		return fail(r.error().message, 2);
	return {};
}

// Once every probe is in place: one line on stderr and, when asked, the
// ready file (written whole, by rename), for wrappers and tests that must
// not guess when tracing has begun.
RecordSession::Stop RecordSession::announce_ready()
{
	uint64_t now = mono_ns();
	// What happened while attaching (exits included) before counting.
	if (auto n = recorder_->poll(0); !n)
		return fail(n.error().message);
	size_t probes = attacher_->attached().size();
	size_t processes = recorder_->live_processes();
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
	std::cerr << "eacgm: recording (" << plural(probes, "probe", "probes") << ", "
		  << plural(processes, "process", "processes") << ")\n";
	if (!launched_ && processes == 0)
		std::cerr << "eacgm: warning: process " << a_.pid
			  << " exited while eacgm was attaching: the recording holds only what it did after its probes "
			     "were in place\n";
	return {};
}

// Says what runs how, sets the signal handlers and the recording's meta,
// then releases the command.
void RecordSession::begin()
{
	for (auto &w : attacher_->take_warnings())
		std::cerr << "eacgm: warning: " << w << "\n";
	if (auto note = single_step_note(attacher_->sites()); !note.empty())
		std::cerr << "eacgm: note: " << note << "\n";
	// Which mode the Python layer runs in: CPython's USDT function probes
	// miss Python-to-Python calls in 3.11 to 3.14, so frames are sampled.
	if (python_)
		std::cerr << "eacgm: python: "
			  << (a_.sample_hz ? "sampling stacks at " + std::to_string(a_.sample_hz) + " Hz of CPU time, "
					   : std::string("no sampling, "))
			  << (a_.python_entries == "off" ? ""
				      : a_.python_entries == "all"
				      ? "every call exactly on 3.8-3.10 and entries from C on 3.11+, "
				      : "entries from C exactly on 3.11+, ")
			  << "the stack behind each CUDA/NCCL/torch call\n";
	if (detector_)
		std::cerr << "eacgm: detect: scoring each CUDA/NCCL/torch call online; each function's first "
			  << detector_->options().cold_start << " calls train its model (cold start)\n";
	if (attacher_->attached().empty())
		std::cerr << "eacgm: note: no traced library is loaded yet; probes attach when the target loads one\n";

	if (launched_)
		g_child = launched_->pid();
	struct sigaction sa = {};
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);

	start_ = std::chrono::steady_clock::now();
	usage_at_start_ = self_usage();
	prog_stats_ = enable_prog_stats(); // from here: the attached phase only
	if (a_.overhead_budget_pct > 0)
		budget_.emplace(a_.overhead_budget_pct, a_.budget_after_s, *engine_, attacher_->specs(),
				python_ && python_->sample_hz() ? python_.get() : nullptr);
	(void)store_->set_meta("command", a_.command.empty() ? "pid " + std::to_string(a_.pid) : join(a_.command, " "));
	(void)store_->set_meta("layers", join(layers_));
	(void)store_->set_meta("eacgm_version", EACGM_VERSION);
	(void)store_->set_meta("start_mono_ns", std::to_string(mono_ns()));
	(void)store_->set_wall_offset(wall_offset_ns());
	if (launched_)
		launched_->release();
}

Result<void> RecordSession::collect()
{
	uint64_t now = mono_ns();
	std::set<uint32_t> traced = recorder_->pids();
	for (auto &c : collectors_) {
		c->collect(now, traced, metrics_, events_);
		for (auto &w : c->take_warnings())
			std::cerr << "eacgm: warning: " << c->layer() << ": " << w << "\n";
	}
	if (detector_) { // context for the calls around them
		for (auto &m : metrics_)
			detector_->observe(m);
		for (auto &e : events_)
			detector_->observe(e);
	}
	if (auto r = store_->add_metrics(metrics_); !r)
		return r;
	if (auto r = store_->add_events(events_); !r)
		return r;
	metrics_.clear();
	events_.clear();
	return {};
}

// Until the earliest collector is due, at most 250 ms: every wake-up of
// eacgm is CPU taken from the job (records wake it sooner, when their
// buffer fills; a traced process's exit wakes it at once).
int RecordSession::poll_timeout_ms() const
{
	// The kernel reports an exit (tracepoint, pidfd) a moment before the
	// process can be reaped, and nothing wakes eacgm then: look again soon.
	if (launched_ && !command_exited_ && !recorder_->live(launched_->pid()))
		return 1;
	uint64_t due = UINT64_MAX, now = mono_ns();
	for (auto &c : collectors_)
		due = std::min(due, c->next_due_ns());
	if (due == UINT64_MAX || due > now + 250'000'000)
		return 250;
	return due <= now ? 0 : int((due - now + 999'999) / 1'000'000);
}

// Until every traced process has exited (the command, the processes it
// started, the processes attached to), or Ctrl-C.
RecordSession::Stop RecordSession::record_until_done()
{
	using clock = std::chrono::steady_clock;
	bool tty = isatty(2);
	auto last_status = start_;
	std::optional<clock::time_point> interrupted_at;
	for (;;) {
		auto n = recorder_->poll(poll_timeout_ms());
		if (!n)
			return fail(n.error().message);
		for (auto &w : recorder_->take_warnings())
			std::cerr << "eacgm: warning: " << w << "\n";
		std::vector<std::string> notes = recorder_->take_notes();
		if (budget_)
			budget_->tick(*recorder_, notes, events_);
		for (auto &m : notes)
			std::cerr << "eacgm: " << m << "\n";
		if (auto r = collect(); !r)
			return fail(r.error().message);
		int status;
		if (launched_ && !command_exited_ && launched_->poll_exit(status)) {
			exit_code_ = status;
			command_exited_ = true;
			recorder_->set_exit(launched_->pid(), status, mono_ns());
			if (size_t left = recorder_->live_processes())
				std::cerr << "eacgm: the command exited (" << status << "); recording its "
					  << plural(left, "process", "processes")
					  << " still running until they exit (Ctrl-C stops)\n";
		}
		if (recorder_->live_processes() == 0 && (!launched_ || command_exited_))
			return {};
		if (g_interrupts.load() && !interrupted_at) {
			interrupted_at = clock::now();
			if (!launched_ || command_exited_)
				return {}; // eacgm alone was asked to stop: the processes go on
			std::cerr << (tty ? "\r\033[K" : "") << "eacgm: interrupted: waiting up to "
				  << a_.stop_timeout_s
				  << " s (--stop-timeout) for the command to exit; interrupt again to discard the "
				     "recording\n";
		}
		// After Ctrl-C the launched command got SIGINT too: give it time to
		// finish its last calls, then stop regardless.
		if (interrupted_at &&
		    clock::now() - *interrupted_at > std::chrono::duration<double>(a_.stop_timeout_s)) {
			std::cerr << (tty ? "\r\033[K" : "") << "eacgm: the command did not exit within "
				  << a_.stop_timeout_s
				  << " s of the interrupt: the recording stops without it (it goes on running, "
				     "untraced)\n";
			exit_code_ = 130;
			return {};
		}
		if (tty && clock::now() - last_status > std::chrono::seconds(1)) {
			last_status = clock::now();
			fprintf(stderr, "\reacgm: recording: %llu spans, %zu live processes ",
				(unsigned long long)recorder_->spans_seen(), recorder_->live_processes());
		}
	}
}

// What eacgm itself cost while attached (the recording's steady state:
// start-up and the final flush excluded), for `summary` and the benchmarks.
void RecordSession::note_own_cost()
{
	SelfUsage now = self_usage();
	double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
	(void)store_->set_meta("attached_s", std::to_string(secs));
	(void)store_->set_meta("agent_cpu_attached_s", std::to_string(now.cpu_s - usage_at_start_.cpu_s));
	(void)store_->set_meta("agent_cpu_s", std::to_string(now.cpu_s));
	(void)store_->set_meta("agent_max_rss_kb", std::to_string(now.max_rss_kb));
	// And what its BPF programs cost the traced processes and the machine
	// (the uprobe traps themselves come on top: the kernel's, not ours).
	uint64_t total = 0;
	for (const ProgStats &p : own_prog_stats()) {
		if (!p.runs)
			continue;
		total += p.run_ns;
		(void)store_->set_meta("bpf_runs:" + p.name, std::to_string(p.runs));
		(void)store_->set_meta("bpf_ns:" + p.name, std::to_string(p.run_ns));
	}
	if (prog_stats_)
		(void)store_->set_meta("bpf_run_ns", std::to_string(total));
}

int RecordSession::finish()
{
	note_own_cost();
	if (isatty(2))
		fprintf(stderr, "\r\033[K");
	for (auto &c : collectors_)
		c->stop();
	if (auto r = collect(); !r)
		return fail(r.error().message);
	if (auto r = recorder_->finish(); !r)
		return fail(r.error().message);
	if (budget_) {
		budget_->write_meta(*store_);
		budget_.reset(); // the last burst ends
	}
	// What a sampled span's "samples" count is worth: the longest period
	// used (the budget may have lowered the rate), which bounds its error.
	if (python_ && python_->longest_sample_period_ns())
		(void)store_->set_meta("python_sample_period_ns", std::to_string(python_->longest_sample_period_ns()));
	if (detector_)
		detector_->flush(true); // refits would score nothing more
	double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
	(void)store_->set_meta("duration_s", std::to_string(secs));
	if (auto r = store_->finish(); !r)
		return fail(r.error().message);
	g_partial[0][0] = 0;

	auto summary = write_trace_and_summary(db_, trace_);
	if (!summary)
		return fail(summary.error().message);
	if (!a_.flamegraph.empty())
		if (auto r = write_file_atomic(a_.flamegraph, recorder_->folded_stacks()); !r)
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
	for (auto step : {&RecordSession::check_args, &RecordSession::build_specs, &RecordSession::check_target,
			  &RecordSession::open_outputs, &RecordSession::open_probes})
		if (auto stop = (this->*step)())
			return *stop;
	open_collectors();
	auto start = a_.command.empty() ? &RecordSession::attach_tree : &RecordSession::launch_command;
	for (auto step :
	     {&RecordSession::check_target_alive, &RecordSession::open_recorder, start, &RecordSession::announce_ready})
		if (auto stop = (this->*step)())
			return *stop;
	begin();
	if (auto stop = record_until_done())
		return *stop;
	return finish();
}

} // namespace

// A pattern probe over libtorch's operator entry points for the operators
// the user named (names or regular expressions over operator names).
Result<SpecSet> torch_ops_spec(const std::vector<std::string> &ops)
{
	nlohmann::json probe = {{"function", "aten::$1"},
				{"match", "^at::_ops::(" + join(ops, "|") + ")::call\\("},
				{"tensor_args", 2}};
	nlohmann::json doc = {{"layer", "torch"}, {"library", "libtorch_cpu.so*"}, {"probes", {probe}}};
	auto s = parse_spec(doc.dump(), "--torch-ops", true);
	if (!s)
		return make_error("--torch-ops " + join(ops) + ": not a valid list of operator names or patterns");
	return s;
}

int run_record(const RecordArgs &args) { return RecordSession(args).run(); }

} // namespace eacgm
