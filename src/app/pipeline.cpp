// SPDX-License-Identifier: Apache-2.0
#include "app/pipeline.h"

#include <algorithm>
#include <iostream>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/target.h"
#include "arch/arch.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/layers.h"
#include "common/text.h"
#include "common/threads.h"
#include "detect/status.h"
#include "layers/gpu.h"
#include "layers/host.h"
#include "layers/torch.h"
#include "probe/prog_stats.h"

namespace eacgm {

bool Pipeline::has(std::string_view layer) const
{
	return std::find(layers_.begin(), layers_.end(), layer) != layers_.end();
}

Pipeline::Stop Pipeline::check()
{
	layers_ = o_.layers.empty() ? layer_names() : o_.layers;
	if (auto r = check_layers(layers_); !r)
		return fail(r.error().message, 2);
	if (!o_.torch_ops.empty() && !has(layer::torch))
		return fail("--torch-ops needs the torch layer; add torch to --layers", 2);
	if (o_.flamegraph && !has(layer::python))
		return fail("--flamegraph needs the python layer; add python to --layers", 2);
	if (auto r = check_bpf_privileges(); !r)
		return fail(r.error().message);
	return {};
}

Pipeline::Stop Pipeline::build_specs()
{
	if (auto s = load_layer_specs(layers_); s)
		specs_.merge(std::move(s.value()));
	else
		return fail(s.error().message);
	if (!o_.torch_ops.empty()) {
		auto extra = torch_ops_spec(o_.torch_ops);
		if (!extra)
			return fail(extra.error().message, 2);
		specs_.merge(std::move(extra.value()));
	}
	for (auto &f : o_.specs) {
		auto s = load_spec_file(f, true);
		if (!s)
			return fail(s.error().message, 2);
		specs_.merge(std::move(s.value()));
	}
	return {};
}

Pipeline::Stop Pipeline::open_probes(ElfPrefetch *prefetch, const std::function<Stop()> &abandon)
{
	auto tracker = ProcTracker::open(o_.trace_all);
	if (!tracker)
		return fail(tracker.error().message);
	tracker_ = std::move(tracker.value());
	if (auto stop = abandon())
		return stop;
	if (has(layer::host)) {
		HostOptions ho;
		ho.interval_ms = o_.host_interval_ms;
		ho.bpf_stats = o_.bpf_stats;
		host_loading_ = std::async(std::launch::async, [fd = tracker_->traced_map_fd(), ho] {
			return open_host_collector(fd, ho);
		});
	}
	if (auto stop = load_engine(abandon))
		return stop;
	attacher_.emplace(*engine_, *tracker_, std::move(specs_));
	attacher_->set_signature_reader(torch_signature_reader(attacher_->specs()));
	attacher_->use_prefetch(prefetch);
	if (auto r = attacher_->load_specs(); !r)
		return fail(r.error().message);
	char ld[PATH_MAX];
	if (realpath(arch::dynamic_linker(), ld))
		if (auto r = tracker_->watch_dynamic_linker(ld); !r)
			std::cerr << "eacgm: warning: " << r.error().message << "\n";
	return {};
}

// The span engine, and the Python programs verified on a thread meanwhile
// (the engine shares the maps prepare() makes).
Pipeline::Stop Pipeline::load_engine(const std::function<Stop()> &abandon)
{
	SpanEngine::Options eo;
	eo.ring_buffer_bytes = o_.ring_buffer_kb * 1024u;
	eo.trace_all = o_.trace_all;
	std::future<Result<void>> python_loading;
	if (has(layer::python)) {
		auto p = PythonTracer::prepare(tracker_->traced_map_fd());
		if (!p)
			return fail(p.error().message);
		python_ = std::move(p.value());
		eo.py_procs = bpf_map__fd(python_->procs_map());
		eo.py_tstates = bpf_map__fd(python_->tstates_map());
		eo.py_events = bpf_map__fd(python_->events_map());
		eo.py_counters = bpf_map__fd(python_->counters_map());
		python_loading = std::async(std::launch::async, [this] { return python_->load(o_.sample_hz); });
		if (o_.python_entries != "off")
			specs_.merge(python_->eval_entry_probes(o_.python_entries == "all"));
		if (auto stop = abandon())
			return stop;
	}
	auto engine = SpanEngine::open(eo, tracker_->traced_map_fd());
	if (!engine)
		return fail(engine.error().message, 2);
	engine_ = std::move(engine.value());
	if (python_loading.valid())
		if (auto r = python_loading.get(); !r)
			return fail(r.error().message);
	return abandon();
}

// The collectors of the layers chosen whose data is read from user space.
void Pipeline::open_collectors()
{
	for (const Layer &l : kLayers) {
		if (!has(l.name))
			continue;
		switch (l.source) {
		case Source::spec:
		case Source::python: break; // probes, with the span engine (open_probes)
		case Source::gpu: open_gpu(); break;
		case Source::host:
			if (!host_loading_.valid())
				break; // open_probes loaded none, or it was taken already
			if (auto c = host_loading_.get())
				collectors_.push_back(std::move(c.value()));
			else
				std::cerr << "eacgm: host layer unavailable: " << c.error().message << "\n";
			break;
		}
	}
}

void Pipeline::open_gpu()
{
	GpuOptions go;
	go.hz = o_.gpu_hz;
	if (auto c = open_gpu_collector(go))
		collectors_.push_back(std::move(c.value()));
	else
		std::cerr << "eacgm: " << c.error().message << "\n";
}

Pipeline::Stop Pipeline::open_loop(Sink &out)
{
	// Online detection: a model per function, trained on its first calls,
	// refitted in the background; it scores each batch before the sinks
	// after it see the batch, and adds what it flags.
	if (o_.detect) {
		auto dopt = detect::DetectOptions::always_on();
		dopt.model.fpr = o_.detect_fpr;
		// The refits are eacgm's CPU too, which the overhead budget bounds
		// as a whole: they get an eighth of it (0.25% of a core at the
		// default 2%). At 0.5% they ran at that rate through a GPT run's
		// first minutes (25 functions' windows doubling), a quarter of what
		// eacgm may spend, taken from the calls' share.
		if (o_.overhead_budget_pct > 0)
			dopt.refit_cpu_share = std::min(dopt.refit_cpu_share, o_.overhead_budget_pct / 100 / 8);
		detector_.emplace(dopt);
		scoring_.emplace(*detector_);
		chain_.add(&*scoring_);
		// Which functions it scores yet, and which are in cold start.
		collectors_.push_back(std::make_unique<detect::StatusCollector>(*detector_));
	}
	chain_.add(&out);
	auto system = LinuxSystem::open();
	if (!system)
		return fail(system.error().message);
	system_.emplace(std::move(system).value());
	auto rings = BpfRings::open(engine_->events_map(), tracker_->events_map(),
				    python_ ? python_->events_map() : nullptr);
	if (!rings)
		return fail(rings.error().message);
	rings_.emplace(std::move(rings).value());
	// The rings are read on a thread of their own from here on, the
	// record loop's rounds (discovery, decoding, the sinks) taking what it
	// read (docs/internals.md). EACGM_RING_READER=0: read between those
	// rounds, as before (a control for measures and bisection).
	RecordSource *source = &*rings_;
	if (const char *off = getenv("EACGM_RING_READER"); !off || std::string(off) != "0") {
		reader_.emplace(*rings_, RingReader::Options{.nice = o_.reader_nice});
		if (auto r = reader_->start(); !r)
			return fail(r.error().message);
		source = &*reader_;
	}
	probes_.emplace(*attacher_, *engine_, *tracker_);
	loop_.emplace(*probes_, *system_, *source, chain_, python_.get());
	if (o_.hang_after_s > 0) {
		// A collector (looks at the calls in flight) and a sink (sees
		// each rank's progress): collectors_ owns it.
		auto watch = std::make_unique<HangWatch>(uint64_t(o_.hang_after_s * 1e9));
		watch->attach(*loop_);
		chain_.add(watch.get());
		collectors_.push_back(std::move(watch));
	}
	loop_->set_tensor_formatter(format_tensor);
	if (!o_.raw_dump.empty()) {
		auto dump = RawDumpWriter::create(o_.raw_dump);
		if (!dump)
			return fail(dump.error().message);
		loop_->set_raw_dump(std::move(*dump));
	}
	if (o_.flamegraph)
		loop_->keep_folded_stacks();
	if (python_ && python_->sample_period_ns())
		loop_->budget_history().set_sample_period(0, python_->sample_period_ns());
	if (o_.python_entries != "off")
		loop_->keep_python_samples(); // measured calls reshape the sampled spans
	loop_->open();
	return {};
}

void Pipeline::begin()
{
	for (auto &w : attacher_->take_warnings())
		std::cerr << "eacgm: warning: " << w << "\n";
	if (auto note = single_step_note(attacher_->sites()); !note.empty())
		std::cerr << "eacgm: note: " << note << "\n";
	// Which mode the Python layer runs in: CPython's USDT function probes
	// miss Python-to-Python calls in 3.11 to 3.14, so frames are sampled.
	if (python_)
		std::cerr << "eacgm: python: "
			  << (o_.sample_hz ? "sampling stacks at " + std::to_string(o_.sample_hz) + " Hz of CPU time, "
					   : std::string("no sampling, "))
			  << (o_.python_entries == "off" ? ""
				      : o_.python_entries == "all"
				      ? "every call exactly on 3.8-3.10 and entries from C on 3.11+, "
				      : "entries from C exactly on 3.11+, ")
			  << "the stack behind each CUDA/NCCL/torch call\n";
	if (detector_)
		std::cerr << "eacgm: detect: scoring each CUDA/NCCL/torch call online; each function's first "
			  << detector_->options().cold_start << " calls train its model (cold start)\n";
	if (attacher_->attached().empty())
		std::cerr << "eacgm: note: no traced library is loaded yet; probes attach when the target loads one\n";
	start_ = std::chrono::steady_clock::now();
	usage_at_start_ = self_usage();
	if (o_.bpf_stats)
		prog_stats_ = enable_prog_stats(); // from here: the attached phase only
	if (o_.overhead_budget_pct > 0)
		budget_.emplace(o_.overhead_budget_pct, o_.budget_after_s, *engine_, attacher_->specs(),
				python_ && python_->sample_hz() ? python_.get() : nullptr);
}

Result<void> Pipeline::collect()
{
	uint64_t now = mono_ns();
	std::set<uint32_t> traced = loop_->pids();
	for (auto &c : collectors_) {
		c->collect(now, traced, metrics_, events_);
		for (auto &w : c->take_warnings())
			std::cerr << "eacgm: warning: " << c->layer() << ": " << w << "\n";
	}
	auto r = chain_.measures(metrics_, events_);
	metrics_.clear();
	events_.clear();
	return r;
}

// Until the earliest collector is due, at most 250 ms: every wake-up of
// eacgm is CPU taken from the job (records wake it sooner, when their
// buffer fills; a traced process's exit wakes it at once). soon: the front
// end expects something the kernel does not wake it for.
int Pipeline::poll_timeout_ms(bool soon) const
{
	if (soon)
		return 1;
	uint64_t due = UINT64_MAX, now = mono_ns();
	for (auto &c : collectors_)
		due = std::min(due, c->next_due_ns());
	if (due == UINT64_MAX || due > now + 250'000'000)
		return 250;
	return due <= now ? 0 : int((due - now + 999'999) / 1'000'000);
}

Pipeline::Stop Pipeline::step(int timeout_ms)
{
	auto n = loop_->poll(timeout_ms);
	if (!n)
		return fail(n.error().message);
	for (auto &w : loop_->take_warnings())
		std::cerr << "eacgm: warning: " << w << "\n";
	std::vector<std::string> notes = loop_->take_notes();
	if (budget_)
		budget_->tick(*loop_, notes, events_);
	for (auto &m : notes)
		std::cerr << "eacgm: " << m << "\n";
	if (auto r = collect(); !r)
		return fail(r.error().message);
	return {};
}

double Pipeline::attached_s() const
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

// What eacgm itself cost while attached (the steady state: start-up and
// the final flush excluded), for `summary` and the benchmarks, and what its
// BPF programs cost the traced processes and the machine (the uprobe traps
// themselves come on top: the kernel's, not ours). Before finish().
void Pipeline::write_start_meta(StoreWriter &store)
{
	(void)store.set_meta("layers", join(layers()));
	(void)store.set_meta("eacgm_version", EACGM_VERSION);
	(void)store.set_meta("hostname", host_name());
	// detect: the agent's own CPU time is not a neighbour's contention.
	(void)store.set_meta("agent_pid", std::to_string(getpid()));
	// The span program measures each call's run-queue wait where the kernel
	// keeps it (CONFIG_SCHED_INFO, which is also what makes
	// /proc/PID/schedstat): a span without kRunqArg then waited 0.
	if (access("/proc/self/schedstat", R_OK) == 0)
		(void)store.set_meta("runq_measured", "1");
	(void)store.set_meta("start_mono_ns", std::to_string(mono_ns()));
	(void)store.set_wall_offset(int64_t(clock_ns(CLOCK_REALTIME)) - int64_t(mono_ns()));
}

void Pipeline::write_meta(StoreWriter &store)
{
	SelfUsage now = self_usage();
	(void)store.set_meta("attached_s", std::to_string(attached_s()));
	(void)store.set_meta("agent_cpu_attached_s", std::to_string(now.cpu_s - usage_at_start_.cpu_s));
	(void)store.set_meta("agent_cpu_s", std::to_string(now.cpu_s));
	(void)store.set_meta("agent_max_rss_kb", std::to_string(now.max_rss_kb));
	uint64_t total = 0;
	for (const ProgStats &p : own_prog_stats()) {
		if (!p.runs)
			continue;
		total += p.run_ns;
		(void)store.set_meta("bpf_runs:" + p.name, std::to_string(p.runs));
		(void)store.set_meta("bpf_ns:" + p.name, std::to_string(p.run_ns));
	}
	if (prog_stats_)
		(void)store.set_meta("bpf_run_ns", std::to_string(total));
}

Pipeline::Stop Pipeline::finish(StoreWriter *store)
{
	for (auto &c : collectors_)
		c->stop();
	// The last records are read by the record loop's own drain.
	if (reader_)
		reader_->stop();
	if (auto r = collect(); !r)
		return fail(r.error().message);
	if (auto r = loop_->finish(); !r)
		return fail(r.error().message);
	if (budget_) {
		if (store)
			budget_->write_meta(*store);
		budget_.reset(); // the last burst ends
	}
	// What a sampled span's "samples" count is worth: the longest period
	// used (the budget may have lowered the rate), which bounds its error.
	if (store && python_)
		(void)store->set_meta("python_registrations", std::to_string(python_->registrations()));
	if (store && python_ && python_->longest_sample_period_ns())
		(void)store->set_meta("python_sample_period_ns", std::to_string(python_->longest_sample_period_ns()));
	if (detector_)
		detector_->flush(true); // refits would score nothing more
	if (store) {
		write_guard_meta(*store);
		write_reader_meta(*store);
	}
	return {};
}

// Counts in the store's meta, each under its key.
static void set_counts(StoreWriter &store, std::initializer_list<std::pair<const char *, uint64_t>> counts)
{
	for (auto [key, n] : counts)
		(void)store.set_meta(key, std::to_string(n));
}

// What the ring-draining thread did (pipeline/ring_reader.h), and how often
// slow work ran on it: never, or the tests fail (common/threads.h).
void Pipeline::write_reader_meta(StoreWriter &store) const
{
	(void)store.set_meta("ring_reader", reader_ ? "on" : "off");
	const RingReader::Stats r = reader_ ? reader_->stats() : RingReader::Stats{};
	if (reader_)
		(void)store.set_meta("ring_reader_nice", std::to_string(r.nice));
	set_counts(store,
		   {
			   {"ring_reads", r.rounds},
			   {"ring_read_records", r.records},
			   {"ring_max_wake_to_read_ns", r.max_wake_to_read_ns},
			   {"ring_max_queued_bytes", r.max_queued_bytes},
			   {"ring_queue_full_waits", r.full_waits},
			   {"ring_reader_short_slice", r.short_slice},
			   {"slow_work_on_drain", slow_work_on_drain()},
		   });
	if (slow_work_on_drain())
		std::cerr << "eacgm: warning: internal: slow work ran on the ring-draining thread ("
			  << last_slow_work_on_drain() << "), which could have let a ring fill; please report it\n";
}

// What the exception guard did (probe/guard_server.h), for the summary:
// whether it ran, its answers and how long they held the processes.
void Pipeline::write_guard_meta(StoreWriter &store) const
{
	(void)store.set_meta("guard", engine_->guarded() ? "on" : "off: " + engine_->unguarded_reason());
	const GuardCounts g = engine_->guard_counts();
	const auto c = engine_->counters();
	set_counts(store,
		   {
			   {"guard_requests", g.requests},
			   {"guard_restored", g.restored},
			   {"guard_rearmed", g.rearmed},
			   {"guard_failed", g.failed},
			   {"guard_moot", g.moot},
			   {"guard_held_ns", g.held_ns},
			   {"guard_max_held_ns", g.max_held_ns},
			   {"guard_unasked", c[EACGM_CNT_GUARD_UNASKED]},
			   {"calls_left", c[EACGM_CNT_LEFT]},
		   });
}

// A pattern probe over libtorch's operator entry points for the operators
// the user named (names or regular expressions over operator names).
Result<SpecSet> torch_ops_spec(const std::vector<std::string> &ops)
{
	nlohmann::json probe = {{"function", "aten::$1"},
				{"match", "^at::_ops::(" + join(ops, "|") + ")::call\\("},
				{"tensor_args", 2}};
	nlohmann::json doc = {{"layer", layer::torch}, {"library", "libtorch_cpu.so*"}, {"probes", {probe}}};
	auto s = parse_spec(doc.dump(), "--torch-ops", true);
	if (!s)
		return make_error(ErrorKind::BadInput,
				  "--torch-ops " + join(ops) + ": not a valid list of operator names or patterns");
	return s;
}

} // namespace eacgm
