// SPDX-License-Identifier: Apache-2.0
// eacgm serve: the node agent. The pipeline `record` runs, on every process
// of the node that calls a traced library or runs a traced interpreter,
// with the Prometheus registry as its sink (and the store when configured),
// until SIGTERM; SIGHUP reloads the filters.
#include <atomic>
#include <chrono>
#include <csignal>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <regex>
#include <sys/stat.h>
#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/config.h"
#include "app/pipeline.h"
#include "app/privileges.h"
#include "app/target.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/text.h"
#include "common/usage.h"
#include "export/clickhouse.h"
#include "export/http.h"
#include "export/metrics.h"
#include "pipeline/record_loop.h"
#include "sinks/clickhouse.h"
#include "sinks/metrics.h"
#include "sinks/store.h"
#include "store/store.h"

namespace eacgm {

namespace {

std::atomic<bool> g_stop{false}, g_reload{false};

void on_stop(int) { g_stop = true; }
void on_hup(int) { g_reload = true; }

// reader_nice: the niceness the agent started at (yield_to_the_jobs).
PipelineOptions pipeline_options(const ServeConfig &c, int reader_nice)
{
	PipelineOptions o;
	o.layers = c.layers;
	o.specs = c.specs;
	o.ring_buffer_kb = c.ring_buffer_kb;
	o.sample_hz = c.sample_hz;
	o.gpu_hz = c.gpu_hz;
	o.host_interval_ms = c.host_interval_ms;
	o.detect = c.detect;
	o.detect_fpr = c.detect_fpr;
	o.overhead_budget_pct = c.overhead_budget_pct;
	o.hang_after_s = c.hang_after_s;
	o.bpf_stats = c.bpf_stats;
	o.trace_all = true;
	o.reader_nice = reader_nice;
	return o;
}

// The configured filters over a process: all that are given must match.
class ProcessFilter {
public:
	explicit ProcessFilter(const ServeConfig::Filter &f) : f_(f)
	{
		for (auto &re : f.comm)
			comm_.emplace_back(re);
	}
	bool operator()(uint32_t pid) const
	{
		std::string dir = "/proc/" + std::to_string(pid);
		if (!comm_.empty()) {
			std::string comm = read_proc_text(dir + "/comm");
			bool any = false;
			for (auto &re : comm_)
				any |= std::regex_match(comm, re);
			if (!any)
				return false;
		}
		if (!f_.cgroup.empty()) {
			std::string cg = cgroup_path(pid);
			bool any = false;
			for (auto &prefix : f_.cgroup)
				any |= cg.rfind(prefix, 0) == 0;
			if (!any)
				return false;
		}
		if (!f_.pid_namespace.empty()) {
			struct stat st;
			if (stat((dir + "/ns/pid").c_str(), &st) != 0)
				return false;
			if (std::find(f_.pid_namespace.begin(), f_.pid_namespace.end(), uint64_t(st.st_ino)) ==
			    f_.pid_namespace.end())
				return false;
		}
		return true;
	}
	// The cgroup v2 path ("0::/system.slice/x.service" -> "/system.slice/x.service").
	static std::string cgroup_path(uint32_t pid)
	{
		std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
		std::string line;
		while (std::getline(in, line))
			if (line.rfind("0::", 0) == 0)
				return line.substr(3);
		return "";
	}

private:
	ServeConfig::Filter f_;
	std::vector<std::regex> comm_;
};

class ServeSession {
public:
	explicit ServeSession(const ServeArgs &a) : a_(a) {}
	int run();

private:
	using Stop = std::optional<int>;
	Stop load_config();
	Stop yield_to_the_jobs();
	Stop drop_privileges();
	Stop open_pipeline();
	Stop open_outputs();
	void open_clickhouse();
	void finish_clickhouse();
	Stop start_serving();
	void find_running_processes();
	void publish_health();
	void reload();
	int finish();

	const ServeArgs &a_;
	ServeConfig config_;
	std::optional<Pipeline> pipeline_;
	MetricsRegistry registry_;
	std::optional<MetricsSink> metrics_;
	std::optional<StoreWriter> store_;
	std::optional<StoreSink> store_sink_;
	std::optional<ClickHouseShipper> shipper_; // [clickhouse]
	std::optional<ClickHouseSink> clickhouse_;
	SinkChain sinks_;
	std::unique_ptr<MetricsServer> server_;
	std::shared_ptr<ProcessFilter> filter_;
	std::chrono::steady_clock::time_point last_health_;
	std::vector<std::string> capabilities_; // what the agent kept of root
	int started_nice_ = 0;                  // its niceness before it yielded to the jobs
	std::string token_;                     // from token_file; "": no token asked
};

ServeSession::Stop ServeSession::load_config()
{
	auto c = load_serve_config(a_.config);
	if (!c)
		return fail(c.error().message, 2);
	config_ = std::move(c.value());
	if (!a_.listen.empty()) {
		if (auto r = parse_listen(a_.listen); !r)
			return fail("--listen: " + r.error().message, 2);
		config_.listen = a_.listen;
	}
	if (!a_.ready_file.empty()) {
		if (auto r = check_writable(a_.ready_file); !r)
			return fail(r.error().message, 2);
		unlink(a_.ready_file.c_str());
	}
	if (!config_.token_file.empty()) {
		auto t = read_token_file(config_.token_file);
		if (!t)
			return fail(t.error().message, 2);
		token_ = std::move(t.value());
	}
	std::string host = config_.listen.substr(0, config_.listen.rfind(':'));
	if (token_.empty() && host != "localhost" && host.rfind("127.", 0) != 0)
		std::cerr << "eacgm: warning: listening on " << config_.listen
			  << " without a token: anyone who reaches the port reads the node's metrics; set token_file\n";
	return {};
}

// Before any thread starts (each inherits its creator's capabilities): the
// agent keeps what tracing needs, the set dist/systemd/eacgm.service.in bounds
// it to (and CAP_SYS_ADMIN only for bpf_stats).
ServeSession::Stop ServeSession::drop_privileges()
{
	auto kept = keep_tracing_privileges({}, config_.bpf_stats);
	if (!kept)
		return fail(kept.error().message);
	capabilities_ = std::move(kept.value());
	return {};
}

ServeSession::Stop ServeSession::open_pipeline()
{
	pipeline_.emplace(pipeline_options(config_, started_nice_));
	if (auto stop = pipeline_->check())
		return stop;
	if (auto stop = pipeline_->build_specs())
		return stop;
	if (auto stop = pipeline_->open_probes(nullptr, [] { return Stop{}; }))
		return stop;
	pipeline_->open_collectors();
	return {};
}

ServeSession::Stop ServeSession::open_outputs()
{
	metrics_.emplace(registry_, config_.top_functions);
	sinks_.add(&*metrics_);
	if (!config_.store.empty()) {
		// Its directory, owner-only, when it is the first start (systemd's
		// StateDirectory= makes it too).
		std::string dir = config_.store.substr(0, config_.store.rfind('/'));
		if (!dir.empty() && dir != config_.store && access(dir.c_str(), F_OK) != 0)
			mkdir(dir.c_str(), 0700);
		auto s = StoreWriter::create(config_.store, true);
		if (!s)
			return fail(s.error().message + " (set store in the configuration, or store = \"\" for none)");
		store_.emplace(std::move(s.value()));
		store_->commit_every(kPipelineCommitNs);
		StoreWriter::Retention keep;
		keep.max_bytes = uint64_t(config_.store_max_mb * 1024 * 1024);
		keep.max_age_ns = uint64_t(config_.store_max_age_hours * 3600e9);
		store_sink_.emplace(*store_, keep);
		sinks_.add(&*store_sink_);
	}
	open_clickhouse();
	if (auto stop = pipeline_->open_loop(sinks_))
		return stop;
	filter_ = std::make_shared<ProcessFilter>(config_.filter);
	pipeline_->loop().discover([this](uint32_t pid) { return (*filter_)(pid); });
	return {};
}

// [clickhouse]: spans shipped beside the store. A server away now, or
// later, is a warning and a count (eacgm_clickhouse_rows_dropped_total),
// never a stop: the node's monitoring goes on without it.
void ServeSession::open_clickhouse()
{
	if (config_.clickhouse.url.empty())
		return;
	auto t = parse_clickhouse_url(config_.clickhouse.url,
				      config_.clickhouse.cluster); // checked with the configuration
	if (auto r = ClickHouseClient(t.value()).query("SELECT 1"); !r)
		std::cerr << "eacgm: warning: " << r.error().message
			  << "; spans are queued for it (up to 64 MB) and retried\n";
	ClickHouseShipper::Options o;
	o.keep_days = unsigned(config_.clickhouse.keep_days);
	shipper_.emplace(t.value(), o);
	std::string host = config_.clickhouse.host.empty() ? host_name() : config_.clickhouse.host;
	clickhouse_.emplace(
		*shipper_,
		ClickHouseSink::Identity{host, config_.clickhouse.job, int64_t(a_.test_clock_shift_ms * 1e6)},
		ClickHouseSink::Options{.spans = *ClickHouseSink::spans_of(config_.clickhouse.spans)});
	sinks_.add(&*clickhouse_);
}

void ServeSession::finish_clickhouse()
{
	if (!shipper_)
		return;
	auto c = shipper_->finish(10); // the sink's last rows were handed over at its finish()
	std::cerr << "eacgm: clickhouse: " << c.describe(config_.clickhouse.url) << "\n";
}

// Every process already running is judged as if it had just started.
void ServeSession::find_running_processes()
{
	DIR *d = opendir("/proc");
	if (!d)
		return;
	uint32_t self = getpid();
	while (dirent *e = readdir(d)) {
		char *end;
		unsigned long pid = strtoul(e->d_name, &end, 10);
		if (*end == 0 && pid && pid != self)
			pipeline_->loop().consider(uint32_t(pid));
	}
	closedir(d);
}

ServeSession::Stop ServeSession::start_serving()
{
	auto &reg = registry_;
	MetricsServer::Handlers h;
	h.metrics = [&reg] { return reg.render(); };
	h.health = [] { return std::string(); };
	h.token = token_;
	auto s = MetricsServer::start(config_.listen, h);
	if (!s)
		return fail(s.error().message);
	server_ = std::move(s.value());
	if (auto r = pipeline_->attacher().attach_installed({}); !r)
		return fail(r.error().message, 2);
	find_running_processes();
	if (auto stop = pipeline_->step(0)) // the running processes judged and attached to
		return stop;
	std::string host = config_.listen.substr(0, config_.listen.rfind(':'));
	std::string url = "http://" + host + ":" + std::to_string(server_->port()) + "/metrics";
	size_t probes = pipeline_->attacher().attached().size();
	size_t processes = pipeline_->loop().live_processes();
	// From here /healthz says ok: the endpoints, the ready file and the
	// line below all say "ready" only once the probes are live.
	server_->ready();
	if (!a_.ready_file.empty()) {
		nlohmann::json ready = {{"pid", getpid()},
					{"port", server_->port()},
					{"probes", probes},
					{"processes", processes},
					{"mono_ns", mono_ns()}};
		if (auto r = write_file_atomic(a_.ready_file, ready.dump() + "\n"); !r)
			return fail(r.error().message);
	}
	std::cerr << "eacgm: serving " << url << " (" << plural(probes, "probe", "probes") << ", "
		  << plural(processes, "process", "processes") << " traced)\n";
	return {};
}

// The agent's own health, as gauges and counters next to what it traces
// (declaring a family again is a no-op).
void ServeSession::publish_health()
{
	{
		registry_.declare("eacgm_agent_records_read_total", MetricsRegistry::counter,
				  "Records the agent read from its ring buffers.");
		registry_.declare("eacgm_agent_spans_filtered_total", MetricsRegistry::counter,
				  "Calls of processes the filters exclude, dropped.");
		registry_.declare("eacgm_agent_probes_attached", MetricsRegistry::gauge, "Probes attached, by layer.");
		registry_.declare(
			"eacgm_agent_probes_throttled", MetricsRegistry::gauge,
			"Probes the overhead budget attaches in bursts now (their calls are estimates), by layer.");
		registry_.declare(
			"eacgm_agent_probe_hits_total", MetricsRegistry::counter,
			"Calls each probe delivered (a throttled probe's only in its bursts), by layer and probe: "
			"rate() gives its hits per second.");
		registry_.declare("eacgm_agent_probe_hit_trap_seconds", MetricsRegistry::gauge,
				  "What one probe hit's trap costs the traced thread, timed by the overhead budget "
				  "after its warm-up.");
		registry_.declare("eacgm_agent_processes_traced", MetricsRegistry::gauge, "Live processes traced.");
		registry_.declare("eacgm_agent_guard_stops_total", MetricsRegistry::counter,
				  "Stops of a traced process by the exception guard, to write its stack while a C++ "
				  "exception, pthread_exit or backtrace() crossed a traced call.");
		registry_.declare("eacgm_agent_guard_held_seconds_total", MetricsRegistry::counter,
				  "Time the exception guard held processes stopped, in all.");
		registry_.declare("eacgm_agent_guard_failures_total", MetricsRegistry::counter,
				  "Return addresses or requests the exception guard could not carry out: the program "
				  "may have ended in std::terminate.");
		registry_.declare("eacgm_agent_store_bytes", MetricsRegistry::gauge,
				  "The agent's store on disk (the file and its WAL).");
		registry_.declare("eacgm_agent_store_rows_expired_total", MetricsRegistry::counter,
				  "Rows the store's bounds (store_max_mb, store_max_age_hours) deleted.");
		registry_.declare("eacgm_agent_process_table", MetricsRegistry::gauge,
				  "Processes the agent holds state for (live, and exited ones not yet handed on).");
		registry_.declare("eacgm_agent_cpu_seconds_total", MetricsRegistry::counter,
				  "The agent's own CPU time, user and system.");
		registry_.declare("eacgm_agent_max_rss_bytes", MetricsRegistry::gauge,
				  "The agent's peak resident memory.");
		registry_.declare("eacgm_agent_rss_bytes", MetricsRegistry::gauge, "The agent's resident memory now.");
		registry_.declare("eacgm_clickhouse_rows_sent_total", MetricsRegistry::counter,
				  "Rows ClickHouse took ([clickhouse]), by table.");
		registry_.declare("eacgm_clickhouse_rows_dropped_total", MetricsRegistry::counter,
				  "Rows never sent to ClickHouse: its queue was full while the server was away.");
		registry_.declare("eacgm_clickhouse_retries_total", MetricsRegistry::counter,
				  "Batches ClickHouse did not take at a try (each tried again after a back-off).");
		registry_.declare(
			"eacgm_clickhouse_spans_let_go_total", MetricsRegistry::counter,
			"Spans held for [clickhouse] spans = \"around\" and let go: no anomaly or hang near them.");
		registry_.declare("eacgm_clickhouse_partitions_dropped_total", MetricsRegistry::counter,
				  "Day partitions dropped past [clickhouse] keep_days (servers without TTL).");
	}
	RecordLoop &rec = pipeline_->loop();
	SelfUsage u = self_usage();
	registry_.set("eacgm_agent_records_read_total", {}, double(rec.records_read()));
	registry_.set("eacgm_agent_spans_filtered_total", {}, double(rec.filtered_spans()));
	const Attacher &att = pipeline_->attacher();
	std::map<std::string, size_t> per_layer;
	for (const AttachedProbe &p : att.attached())
		per_layer[att.specs().probes[p.spec_id].layer]++;
	std::map<std::string, size_t> throttled; // by the overhead budget, now
	for (uint32_t spec : pipeline_->engine().throttled())
		throttled[att.specs().probes[spec].layer]++;
	for (auto &[layer, n] : per_layer) {
		registry_.set("eacgm_agent_probes_attached", {{"layer", layer}}, double(n));
		registry_.set("eacgm_agent_probes_throttled", {{"layer", layer}}, double(throttled[layer]));
	}
	// Only the probes that fired (a torch process has hundreds attached),
	// summed by name: specs of one function's variants share it.
	std::map<std::pair<std::string, std::string>, uint64_t> hits;
	for (uint32_t id = 0; id < rec.spans_per_spec().size(); id++)
		if (uint64_t n = rec.spans_per_spec()[id])
			hits[{att.specs().probes[id].layer, att.specs().probes[id].function}] += n;
	for (auto &[probe, n] : hits)
		registry_.set("eacgm_agent_probe_hits_total", {{"layer", probe.first}, {"probe", probe.second}},
			      double(n));
	if (const OverheadKeeper *b = pipeline_->budget(); b && b->trap_ns() >= 0)
		registry_.set("eacgm_agent_probe_hit_trap_seconds", {}, b->trap_ns() / 1e9);
	registry_.set("eacgm_agent_processes_traced", {}, double(rec.live_processes()));
	const GuardCounts g = pipeline_->engine().guard_counts();
	registry_.set("eacgm_agent_guard_stops_total", {}, double(g.requests));
	registry_.set("eacgm_agent_guard_held_seconds_total", {}, double(g.held_ns) / 1e9);
	registry_.set("eacgm_agent_guard_failures_total", {},
		      double(g.failed + pipeline_->engine().counters()[EACGM_CNT_GUARD_UNASKED]));
	registry_.set("eacgm_agent_process_table", {}, double(rec.known_processes()));
	if (store_) {
		registry_.set("eacgm_agent_store_bytes", {}, double(store_->file_bytes()));
		registry_.set("eacgm_agent_store_rows_expired_total", {}, double(store_sink_->rows_expired()));
	}
	if (shipper_) {
		auto c = shipper_->counts();
		for (auto &[table, n] : c.sent)
			registry_.set("eacgm_clickhouse_rows_sent_total", {{"table", table}}, double(n));
		registry_.set("eacgm_clickhouse_rows_dropped_total", {}, double(c.rows_dropped));
		registry_.set("eacgm_clickhouse_retries_total", {}, double(c.retries));
		registry_.set("eacgm_clickhouse_spans_let_go_total", {}, double(clickhouse_->spans_let_go()));
		registry_.set("eacgm_clickhouse_partitions_dropped_total", {}, double(c.partitions_dropped));
	}
	registry_.set("eacgm_agent_cpu_seconds_total", {}, u.cpu_s);
	registry_.set("eacgm_agent_max_rss_bytes", {}, double(u.max_rss_kb) * 1024);
	std::ifstream statm("/proc/self/statm");
	uint64_t pages = 0, resident = 0;
	if (statm >> pages >> resident)
		registry_.set("eacgm_agent_rss_bytes", {}, double(resident) * double(sysconf(_SC_PAGESIZE)));
}

// SIGHUP: the filters apply to processes judged from now on; keys that
// shape the probes or the listener need a restart, and say so.
void ServeSession::reload()
{
	auto c = load_serve_config(a_.config);
	if (!c) {
		std::cerr << "eacgm: reload: " << c.error().message << "; the running configuration stays\n";
		return;
	}
	filter_ = std::make_shared<ProcessFilter>(c->filter);
	config_.filter = c->filter;
	std::cerr << "eacgm: reloaded " << (a_.config.empty() ? kDefaultServeConfig : a_.config)
		  << ": the filters apply to processes found from now on (other keys take effect at restart)\n";
}

int ServeSession::finish()
{
	if (store_)
		pipeline_->write_meta(*store_);
	if (auto stop = pipeline_->finish(store_ ? &*store_ : nullptr))
		return *stop;
	finish_clickhouse();
	if (store_) {
		(void)store_->set_meta("command", "eacgm serve");
		if (auto r = store_->finish(); !r)
			return fail(r.error().message);
	}
	std::cerr << "eacgm: stopped\n";
	return 0;
}

// Before any other thread starts, and before the capabilities are
// dropped: a thread may not change the niceness of one that holds
// capabilities it does not (the kernel's cap_safe_nice).
ServeSession::Stop ServeSession::yield_to_the_jobs()
{
	// The ring-draining thread, started later, takes the niceness the
	// agent started at back (pipeline/ring_reader.h). Without
	// CAP_SYS_RESOURCE (the unit grants it) the limit stays, and the thread
	// runs at the configured niceness as the others do: a loss of latency,
	// not of function, and not worth a warning at every start.
	started_nice_ = getpriority(PRIO_PROCESS, 0);
	(void)allow_niceness_back_to(started_nice_);
	if (auto r = lower_priority(config_.nice); !r)
		return fail(r.error().message);
	return {};
}

int ServeSession::run()
{
	raise_open_file_limit();
	for (auto step : {&ServeSession::load_config, &ServeSession::yield_to_the_jobs, &ServeSession::drop_privileges,
			  &ServeSession::open_pipeline, &ServeSession::open_outputs})
		if (auto stop = (this->*step)())
			return *stop;
	// Without SA_RESTART: a signal ends the wait at once.
	struct sigaction stop = {}, hup = {};
	stop.sa_handler = on_stop;
	hup.sa_handler = on_hup;
	sigaction(SIGTERM, &stop, nullptr);
	sigaction(SIGINT, &stop, nullptr);
	sigaction(SIGHUP, &hup, nullptr);
	pipeline_->begin();
	if (store_) {
		pipeline_->write_start_meta(*store_);
		(void)store_->set_meta("agent_capabilities", join(capabilities_, ","));
	}
	if (auto stop = start_serving())
		return *stop;
	publish_health();
	while (!g_stop) {
		if (g_reload.exchange(false))
			reload();
		if (auto stop = pipeline_->step(pipeline_->poll_timeout_ms()))
			return *stop;
		// Once a second: a scrape is rarer, and reading /proc for the
		// agent's memory at every wake-up was a quarter of its CPU under
		// ResNet-18 (perf).
		if (auto now = std::chrono::steady_clock::now(); now - last_health_ >= std::chrono::seconds(1)) {
			last_health_ = now;
			publish_health();
		}
	}
	return finish();
}

} // namespace

int run_serve(const ServeArgs &args) { return ServeSession(args).run(); }

} // namespace eacgm
