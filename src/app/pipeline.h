// SPDX-License-Identifier: Apache-2.0
// The pipeline both front ends run (`record` for one job, `serve` for the
// node): probes (BPF objects, attacher, budget) -> pipeline (decode, process
// table, joiners) -> sinks (detector, store, metrics). A front end
// picks the layers and options, opens it in steps (it may abandon between
// them), adds its targets through tracker() and loop(), then calls
// step() until it is done and finish() once.
#pragma once
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/overhead.h"
#include "common/fd.h"
#include "common/usage.h"
#include "detect/online.h"
#include "layers/collector.h"
#include "layers/python.h"
#include "pipeline/bpf_sources.h"
#include "pipeline/linux_system.h"
#include "pipeline/record_loop.h"
#include "pipeline/ring_reader.h"
#include "pipeline/sink.h"
#include "probe/attacher.h"
#include "probe/elf_prefetch.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"
#include "probe/spec.h"
#include "sinks/hangs.h"
#include "sinks/scoring.h"
#include "store/store.h"

namespace eacgm {

struct PipelineOptions {
	std::vector<std::string> layers; // empty: every layer
	std::vector<std::string> specs;  // --spec files
	std::vector<std::string> torch_ops;
	unsigned ring_buffer_kb = 8192;
	unsigned sample_hz = 1000;
	std::string python_entries = "off";
	double gpu_hz = 10;
	unsigned host_interval_ms = 100;
	bool detect = true;
	double detect_fpr = 1e-4;
	double overhead_budget_pct = 2;
	double budget_after_s = 10;
	// A call of a "waits" spec in flight this long is reported as a hang
	// (sinks/hangs.h); 0: not watched.
	double hang_after_s = 0;
	bool flamegraph = false;
	// The kernel's run-time accounting of BPF programs (meta bpf_runs:*,
	// bpf_ns:*; the host layer's BPF share of host_layer_cpu_pct). Off by
	// default: it adds two clock reads to every program run on the node,
	// about 60 ns to each traced call here (a tenth of the uprobe trap).
	bool bpf_stats = false;
	// Every process that calls a traced library is traced (serve), rather
	// than the trees the front end tracks (record).
	bool trace_all = false;
	// The ring-draining thread's niceness: the one eacgm started at, which
	// it keeps when the rest yields to the job (--nice).
	int reader_nice = 0;
	// Every span record decode sees, kept for bench_pipeline_cost --replay
	// (record --raw-dump; pipeline/raw_dump.h). Empty: none.
	std::string raw_dump;
};

class Pipeline {
public:
	// An exit code: the pipeline cannot go on (the message was printed).
	using Stop = std::optional<int>;
	explicit Pipeline(PipelineOptions o) : o_(std::move(o)) {}
	Pipeline(const Pipeline &) = delete;
	Pipeline &operator=(const Pipeline &) = delete;

	// The layers and the flags that need one; then the probe specs.
	Stop check();
	Stop build_specs();
	bool has(std::string_view layer) const;
	const SpecSet &specs() const { return specs_; } // until open_probes()
	const std::vector<std::string> &layers() const { return layers_; }
	// Loads the BPF objects (prefetch: ELF files being read ahead, not
	// owned, may be null). `abandon` is asked between the slow steps: an
	// exit code when the front end's target is gone and loading on is moot.
	Stop open_probes(ElfPrefetch *prefetch, const std::function<Stop()> &abandon);
	// Layers read from user space; one that cannot work here says why once.
	void open_collectors();
	// The record loop (pipeline/record_loop.h), writing to the detector (when on) and then `out`.
	Stop open_loop(Sink &out);
	// Says what runs how; the budget and the BPF run counters start here.
	void begin();
	// One round: waits up to poll_timeout_ms() for records, handles them,
	// applies the budget, collects the user-space layers.
	Stop step(int timeout_ms);
	int poll_timeout_ms(bool soon = false) const;
	// The last records, measures, process table and loss counts; the
	// budget's doings and the sampling period in store's meta (when given).
	Stop finish(StoreWriter *store);
	// eacgm's cost while attached and the budget's doings, in the store's meta.
	void write_meta(StoreWriter &store);
	// The exception guard's doings, in the store's meta (finish() writes them).
	void write_guard_meta(StoreWriter &store) const;
	// The ring-draining thread's doings, in the store's meta (finish() too).
	void write_reader_meta(StoreWriter &store) const;
	// What a recording says of itself from the start: the layers, eacgm's
	// version, the host (eacgm merge labels its processes with it) and the
	// clocks (the monotonic time at start, its offset to Unix time).
	void write_start_meta(StoreWriter &store);

	ProcTracker &tracker() { return *tracker_; }
	Attacher &attacher() { return *attacher_; }
	RecordLoop &loop() { return *loop_; }
	// The threads that keep eacgm's niceness when the rest yields to the
	// job (lower_priority): the ring-draining thread, where it runs.
	std::vector<pid_t> kept_priority() const
	{
		return reader_ ? std::vector<pid_t>{reader_->tid()} : std::vector<pid_t>{};
	}
	PythonTracer *python() { return python_.get(); }
	const SpanEngine &engine() const { return *engine_; }
	detect::OnlineDetector *detector() { return detector_ ? &*detector_ : nullptr; }
	const OverheadKeeper *budget() const { return budget_ ? &*budget_ : nullptr; }
	double attached_s() const;

private:
	void open_gpu();
	Stop load_engine(const std::function<Stop()> &abandon);
	Result<void> collect();

	PipelineOptions o_;
	std::vector<std::string> layers_;
	SpecSet specs_;
	std::unique_ptr<ProcTracker> tracker_;
	std::unique_ptr<PythonTracer> python_;
	std::unique_ptr<SpanEngine> engine_;
	std::optional<Attacher> attacher_;
	std::vector<std::unique_ptr<Collector>> collectors_;
	// The host layer's programs load while the span and Python ones do:
	// verifying and relocating each BPF object takes tens of milliseconds,
	// and start-up is what a user waits for.
	std::future<Result<std::unique_ptr<Collector>>> host_loading_;
	std::optional<detect::OnlineDetector> detector_;
	std::optional<detect::ScoringSink> scoring_;
	SinkChain chain_;
	// What the record loop reads and asks (pipeline/sources.h).
	std::optional<LinuxSystem> system_;
	std::optional<BpfRings> rings_;
	std::optional<RingReader> reader_; // reads rings_; before the record loop, which reads it
	std::optional<BpfProbes> probes_;
	std::optional<RecordLoop> loop_;
	std::optional<OverheadKeeper> budget_;
	std::chrono::steady_clock::time_point start_;
	SelfUsage usage_at_start_; // eacgm's own CPU when the recording began
	UniqueFd prog_stats_;      // the kernel counts our programs' runs and time while held
	std::vector<Metric> metrics_;
	std::vector<Event> events_;
};

// The user's --torch-ops as a pattern spec over libtorch's operators.
Result<SpecSet> torch_ops_spec(const std::vector<std::string> &ops);

} // namespace eacgm
