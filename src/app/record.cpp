// eacgm record: sets up the probes, runs or attaches to the target, streams
// events into the store until the target is done, then writes the trace and
// prints the summary.
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
#include <unistd.h>

#include "app/commands.h"
#include "app/target.h"
#include "common/fs.h"
#include "export/perfetto.h"
#include "export/summary.h"
#include "ingest/recorder.h"
#include "probe/attacher.h"
#include "detect/online.h"
#include "layers/collector.h"
#include "layers/gpu.h"
#include "layers/host.h"
#include "layers/python.h"
#include "probe/spec.h"
#include "store/store.h"

namespace eacgm {

const std::vector<std::string> kAllLayers = {"cuda", "nccl", "torch", "python", "gpu", "host"};
const std::vector<std::string> kSpecLayers = {"cuda", "nccl", "torch"};

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

uint64_t mono_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int64_t wall_offset_ns()
{
	timespec r, m;
	clock_gettime(CLOCK_REALTIME, &r);
	clock_gettime(CLOCK_MONOTONIC, &m);
	return (r.tv_sec - m.tv_sec) * 1000000000ll + (r.tv_nsec - m.tv_nsec);
}

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

int fail(const std::string &msg, int code = 1)
{
	std::cerr << "eacgm: " << msg << "\n";
	return code;
}

std::string join(const std::vector<std::string> &v, const char *sep = ",")
{
	std::string s;
	for (auto &x : v)
		s += (s.empty() ? "" : sep) + x;
	return s;
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

int run_record(const RecordArgs &a)
{
	if (a.pid && !a.command.empty())
		return fail("give either -p PID or -- COMMAND, not both", 2);
	if (!a.pid && a.command.empty())
		return fail("nothing to record: give -p PID or -- COMMAND [ARGS...]", 2);
	std::vector<std::string> layers = a.layers.empty() ? kAllLayers : a.layers;
	for (auto &l : layers)
		if (std::find(kAllLayers.begin(), kAllLayers.end(), l) == kAllLayers.end())
			return fail("unknown layer '" + l + "'; choose from " + join(kAllLayers), 2);
	if (auto r = check_bpf_privileges(); !r)
		return fail(r.error().message);

	SpecSet specs;
	auto has = [&](const std::string &l) { return std::find(layers.begin(), layers.end(), l) != layers.end(); };
	bool python = has("python");
	for (auto &l : kSpecLayers) {
		if (!has(l))
			continue;
		auto s = load_builtin_spec(l);
		if (!s)
			return fail(s.error().message);
		specs.merge(std::move(s.value()));
	}
	if (!a.torch_ops.empty()) {
		if (!has("torch"))
			return fail("--torch-ops needs the torch layer; add torch to --layers", 2);
		auto extra = torch_ops_spec(a.torch_ops);
		if (!extra)
			return fail(extra.error().message, 2);
		specs.merge(std::move(extra.value()));
	}
	for (auto &f : a.specs) {
		auto s = load_spec_file(f, true);
		if (!s)
			return fail(s.error().message, 2);
		specs.merge(std::move(s.value()));
	}

	std::string exe;
	if (!a.command.empty()) {
		auto r = resolve_command(a.command[0]);
		if (!r)
			return fail(r.error().message, 127);
		exe = r.value();
	} else if (!process_exists(a.pid)) {
		return fail("no process with PID " + std::to_string(a.pid) + "; check it with 'ps -p " +
			    std::to_string(a.pid) + "'", 2);
	}

	std::string db = a.output.empty() ? default_output() : a.output;
	std::string trace = a.perfetto.empty() ? trace_path_for(db) : a.perfetto;
	for (auto &p : {db, trace})
		if (auto r = check_writable(p); !r)
			return fail(r.error().message, 2);
	if (!a.flamegraph.empty()) {
		if (!python)
			return fail("--flamegraph needs the python layer; add python to --layers", 2);
		if (auto r = check_writable(a.flamegraph); !r)
			return fail(r.error().message, 2);
	}

	auto store = StoreWriter::create(db);
	if (!store)
		return fail(store.error().message);
	// StoreWriter's work file and SQLite's WAL files beside it.
	snprintf(g_partial[0], PATH_MAX, "%s.partial", db.c_str());
	snprintf(g_partial[2], PATH_MAX, "%s.partial-wal", db.c_str());
	snprintf(g_partial[3], PATH_MAX, "%s.partial-shm", db.c_str());
	snprintf(g_partial[1], PATH_MAX, "%s.tmp.%d", trace.c_str(), (int)getpid()); // write_file_atomic's

	auto tracker = ProcTracker::open(false);
	if (!tracker)
		return fail(tracker.error().message);
	std::unique_ptr<PythonTracer> py;
	SpanEngine::Options eo;
	eo.ring_buffer_bytes = a.ring_buffer_kb * 1024u;
	if (python) {
		auto p = PythonTracer::open((*tracker)->traced_map_fd(), a.sample_hz);
		if (!p)
			return fail(p.error().message);
		py = std::move(p.value());
		eo.py_procs = py->procs_map();
		eo.py_tstates = py->tstates_map();
		eo.py_events = py->events_map();
		eo.py_counters = py->counters_map();
		if (a.python_entries != "off")
			specs.merge(py->eval_entry_probes(a.python_entries == "all"));
	}
	auto engine = SpanEngine::open(eo, (*tracker)->traced_map_fd());
	if (!engine)
		return fail(engine.error().message, 2);
	Attacher attacher(**engine, **tracker, std::move(specs));
	if (auto r = attacher.load_specs(); !r)
		return fail(r.error().message);
	char ld[PATH_MAX];
	if (realpath("/lib64/ld-linux-x86-64.so.2", ld))
		if (auto r = (*tracker)->watch_dynamic_linker(ld); !r)
			std::cerr << "eacgm: warning: " << r.error().message << "\n";

	// Layers read from user space. One that cannot work here says why once
	// and the others go on (a machine without a GPU still has a host).
	std::vector<std::unique_ptr<Collector>> collectors;
	if (has("gpu")) {
		GpuOptions go;
		go.hz = a.gpu_hz;
		if (auto c = open_gpu_collector(go))
			collectors.push_back(std::move(c.value()));
		else
			std::cerr << "eacgm: " << c.error().message << "\n";
	}
	if (has("host")) {
		HostOptions ho;
		ho.interval_ms = a.host_interval_ms;
		if (auto c = open_host_collector((*tracker)->traced_map_fd(), ho))
			collectors.push_back(std::move(c.value()));
		else
			std::cerr << "eacgm: host layer unavailable: " << c.error().message << "\n";
	}

	Recorder recorder(attacher, **engine, **tracker, store.value(), py.get());
	// Online detection: a model per function, trained on its first calls,
	// refitted in the background; anomalies go to the store as they come.
	std::optional<detect::OnlineDetector> detector;
	if (a.detect) {
		detect::DetectOptions dopt;
		dopt.model.fpr = a.detect_fpr;
		detector.emplace(dopt);
		recorder.set_detector(&*detector);
	}
	if (auto r = recorder.open(); !r)
		return fail(r.error().message);

	std::optional<LaunchedCommand> launched;
	std::vector<uint32_t> roots;
	if (!a.command.empty()) {
		auto l = LaunchedCommand::start(a.command, exe);
		if (!l)
			return fail(l.error().message);
		launched.emplace(std::move(l.value()));
		if (auto r = (*tracker)->track(launched->pid()); !r)
			return fail(r.error().message);
		recorder.add_root(launched->pid(), getpid(), mono_ns());
		if (auto r = attacher.attach_installed(linked_libraries(exe)); !r)
			return fail(r.error().message, 2); // the gate closes: the command never runs
		roots.push_back(launched->pid());
	} else {
		for (uint32_t p : process_tree(a.pid)) {
			if (auto r = (*tracker)->track(p); !r)
				return fail(r.error().message);
			recorder.add_root(p, 0, mono_ns());
			if (auto r = attacher.scan_process(p); !r && p == (uint32_t)a.pid && process_exists(p))
				return fail(r.error().message, 2);
			roots.push_back(p);
		}
		if (auto r = attacher.attach_installed({}); !r)
			return fail(r.error().message, 2);
		if (!process_exists(a.pid))
			return fail("process " + std::to_string(a.pid) +
				    " exited while eacgm was attaching; nothing was recorded", 1);
	}
	for (auto &w : attacher.take_warnings())
		std::cerr << "eacgm: warning: " << w << "\n";
	// Which mode the Python layer runs in: CPython's USDT function probes
	// miss Python-to-Python calls in 3.11 to 3.14, so frames are sampled.
	if (python)
		std::cerr << "eacgm: python: "
			  << (a.sample_hz ? "sampling stacks at " + std::to_string(a.sample_hz) + " Hz of CPU time, "
					  : std::string("no sampling, "))
			  << (a.python_entries == "off"   ? ""
			      : a.python_entries == "all" ? "every call exactly on 3.8-3.10 and entries from C on 3.11+, "
							  : "entries from C exactly on 3.11+, ")
			  << "the stack behind each CUDA/NCCL/torch call\n";
	if (detector)
		std::cerr << "eacgm: detect: scoring each CUDA/NCCL/torch call online; each function's first "
			  << detector->options().cold_start << " calls train its model (cold start)\n";
	if (attacher.attached().empty())
		std::cerr << "eacgm: note: no traced library is loaded yet; probes attach when the target loads one\n";

	if (launched)
		g_child = launched->pid();
	struct sigaction sa = {};
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);

	auto start = std::chrono::steady_clock::now();
	uint64_t start_ns = mono_ns();
	(void)store->set_meta("command", a.command.empty() ? "pid " + std::to_string(a.pid) : join(a.command, " "));
	(void)store->set_meta("layers", join(layers));
	(void)store->set_meta("eacgm_version", EACGM_VERSION);
	(void)store->set_meta("start_mono_ns", std::to_string(start_ns));
	(void)store->set_wall_offset(wall_offset_ns());
	if (launched)
		launched->release();

	std::vector<Metric> metrics;
	std::vector<Event> events;
	auto collect = [&]() -> Result<void> {
		uint64_t now = mono_ns();
		std::set<uint32_t> traced = recorder.pids();
		for (auto &c : collectors) {
			c->collect(now, traced, metrics, events);
			for (auto &w : c->take_warnings())
				std::cerr << "eacgm: warning: " << c->layer() << ": " << w << "\n";
		}
		if (detector) { // context for the calls around them
			for (auto &m : metrics)
				detector->observe(m);
			for (auto &e : events)
				detector->observe(e);
		}
		if (auto r = store->add_metrics(metrics); !r)
			return r;
		if (auto r = store->add_events(events); !r)
			return r;
		metrics.clear();
		events.clear();
		return {};
	};

	int exit_code = 0;
	bool done = false;
	bool tty = isatty(2);
	auto last_status = start;
	std::optional<std::chrono::steady_clock::time_point> interrupted_at;
	while (!done) {
		auto n = recorder.poll(50);
		if (!n)
			return fail(n.error().message);
		for (auto &w : recorder.take_warnings())
			std::cerr << "eacgm: warning: " << w << "\n";
		if (auto r = collect(); !r)
			return fail(r.error().message);
		int status;
		if (launched && launched->poll_exit(status)) {
			exit_code = status;
			recorder.set_exit(launched->pid(), status, mono_ns());
			done = true;
		}
		if (!launched && recorder.live_processes() == 0)
			done = true;
		if (g_interrupts.load() && !interrupted_at) {
			interrupted_at = std::chrono::steady_clock::now();
			if (!launched)
				done = true;
		}
		// After Ctrl-C the launched command got SIGINT too: give it a moment
		// to finish its last calls, then stop regardless.
		if (interrupted_at && std::chrono::steady_clock::now() - *interrupted_at > std::chrono::seconds(2)) {
			exit_code = 130;
			done = true;
		}
		auto now = std::chrono::steady_clock::now();
		if (tty && now - last_status > std::chrono::seconds(1)) {
			last_status = now;
			fprintf(stderr, "\reacgm: recording: %llu spans, %zu live processes ",
				(unsigned long long)recorder.spans_seen(), recorder.live_processes());
		}
	}
	if (tty)
		fprintf(stderr, "\r\033[K");
	for (auto &c : collectors)
		c->stop();
	if (auto r = collect(); !r)
		return fail(r.error().message);
	if (auto r = recorder.finish(); !r)
		return fail(r.error().message);
	if (detector)
		detector->flush();
	double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	(void)store->set_meta("duration_s", std::to_string(secs));
	if (auto r = store->finish(); !r)
		return fail(r.error().message);
	g_partial[0][0] = 0;

	auto rec = load_recording(db);
	if (!rec)
		return fail(rec.error().message);
	if (auto r = write_perfetto(rec.value(), trace); !r)
		return fail(r.error().message);
	if (!a.flamegraph.empty())
		if (auto r = write_file_atomic(a.flamegraph, recorder.folded_stacks()); !r)
			return fail(r.error().message);
	std::cerr << format_summary(rec.value());
	std::cerr << "recording: " << db << "\ntrace:     " << trace << " (open in ui.perfetto.dev)\n";
	if (!a.flamegraph.empty())
		std::cerr << "flame graph stacks: " << a.flamegraph << "\n";
	return exit_code;
}

} // namespace eacgm
