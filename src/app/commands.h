// SPDX-License-Identifier: Apache-2.0
// One function per subcommand; each returns the process exit code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "detect/rootcause.h"

namespace CLI {
class App;
}

namespace eacgm {

// Prints "eacgm: message" on stderr and gives the exit code to stop with.
int fail(const std::string &message, int code = 1);
// The message of the last fail(): what a recording kept after a failure
// says ended it (meta "incomplete").
const std::string &last_failure();

// Registers the subcommand on the app; the returned callback runs it.
struct RecordArgs {
	std::vector<std::string> layers;
	std::vector<std::string> specs;
	std::string output;
	std::string perfetto;
	std::string flamegraph; // collapsed Python stacks, with the python layer
	std::string ready_file; // written once every probe is attached
	int pid = 0;
	unsigned ring_buffer_kb = 8192;
	unsigned sample_hz = 1000;          // Python stack samples per second per CPU
	std::string python_entries = "off"; // eval-loop entries: auto (3.11+), all, off
	double gpu_hz = 10;                 // NVML samples per second
	unsigned host_interval_ms = 100;    // host layer aggregation interval
	std::vector<std::string> torch_ops; // extra operators (names or regexes) for the torch layer
	bool detect = true;                 // score calls online against per-function models
	double detect_fpr = 1e-4;           // online: target false alarms per call
	double stop_timeout_s = 2;          // after Ctrl-C: how long the command gets to exit
	double overhead_budget_pct = 2;     // calls' share of their threads' CPU; 0: off
	double budget_after_s = 10;         // first budget decision after this long
	int nice = 10;                      // eacgm's threads' niceness (0-19); a launched command keeps its own
	double hang_after_s = 0;            // a waiting call in flight this long is a hang; 0: off
	bool bpf_stats = false;             // the kernel's run-time accounting of our programs
	std::string raw_dump;               // hidden: the span records decode saw (bench_pipeline_cost --replay)
	std::string clickhouse;             // also ship every span to this ClickHouse HTTP address
	std::string clickhouse_cluster;     // ... through Distributed tables over this cluster's shards
	std::vector<std::string> command;   // after "--"
};
int run_record(const RecordArgs &args);
int run_export(const std::string &db, const std::string &perfetto);
// Writes a finished recording's trace and returns its summary, reading its
// spans once, one at a time (record's end, export); spans: how many.
Result<std::string> write_trace_and_summary(const std::string &db, const std::string &trace, uint64_t *spans = nullptr);
int run_summary(const std::string &db);

// eacgm sql (src/app/sql.cpp).
struct SqlArgs {
	std::string db, query;
	std::string format = "list"; // list (a|b), csv, json (an object a line)
	bool header = true;
};
int run_sql(const SqlArgs &args);

// eacgm cluster summary|stragglers|hangs|schema: across the nodes that ship to one
// ClickHouse (src/app/cluster.cpp).
struct ClusterArgs {
	std::string what; // "summary", "stragglers", "hangs" or "schema"
	std::string clickhouse;
	std::string cluster;   // schema: Distributed tables over this cluster
	unsigned ttl_days = 0; // schema: with a TTL
	std::string job, host, since;
	int rank = -1;
	size_t limit = 20;
	bool show_sql = false;
};
int run_cluster(const ClusterArgs &args);
// eacgm export --sqlite: a copy with a row per span (store.h, write_flat_copy).
int run_export_sqlite(const std::string &db, const std::string &out);
int run_doctor();

// eacgm serve (src/app/serve.cpp): the node agent.
struct ServeArgs {
	std::string config;             // empty: /etc/eacgm/eacgm.toml when it exists, else the defaults
	std::string listen;             // overrides the config's
	std::string ready_file;         // written once serving, with the port
	double test_clock_shift_ms = 0; // hidden: the wall clock of rows shipped is off by this (tests)
};
int run_serve(const ServeArgs &args);
inline constexpr const char *kDefaultServeConfig = "/etc/eacgm/eacgm.toml";

// eacgm detect (src/app/detect.cpp).
struct DetectArgs {
	std::string db;
	bool json = false;
	double fpr = 1e-4; // as record's online detection
	std::string covariance = "full";
	std::string components = "1-4";
	std::string rule = "component";
	double window_s = 3600;
	size_t cold_start = 200;
	size_t refit_every = 1000;
	unsigned restarts = 3;
	uint64_t seed = 1;
	double var_floor = 1e-3;
	double min_weight = 0.02;
	std::vector<std::string> layers;
	bool no_store = false;
	size_t max_rows = 20;
	// Replay the recording through the online detector (cold start, window,
	// refits) instead of fitting each function on all its calls.
	bool replay = false;
	double min_slowdown = detect::kWorthTelling.min_slowdown;
	double min_excess_us = static_cast<double>(detect::kWorthTelling.min_excess_ns) / 1e3;
	double noise_alpha = detect::kWorthTelling.noise_alpha;
	double sure_excess_us = static_cast<double>(detect::kWorthTelling.sure_ns) / 1e3;
	size_t max_fit_rows = 10000; // EM on at most this many evenly spaced calls a function (0: all)
	std::string features;        // CSV of every call's features, score and verdict
};
int run_detect(const DetectArgs &args);

// eacgm merge (src/app/merge.cpp): recordings of several nodes made one.
struct MergeArgs {
	std::vector<std::string> inputs;
	std::string output;
	std::string perfetto; // also the merged trace
	bool force = false;   // replace an existing output
};
CLI::App *add_merge(CLI::App &app, MergeArgs &ma);
int run_merge(const MergeArgs &args);

// eacgm probes list|generate (src/app/probes.cpp).
struct ProbesArgs {
	std::string action; // "list" or "generate"
	std::string lib;    // path, or a soname in the loader cache
	std::string match;  // regex over demangled (or raw) names
	std::string output; // generate: the spec file
	std::string layer = "user";
	size_t max = 200;
	bool all = false; // list: no --max limit
};
int run_probes(const ProbesArgs &args);

} // namespace eacgm
