// SPDX-License-Identifier: Apache-2.0
// eacgm serve's configuration: a TOML file (/etc/eacgm/eacgm.toml by
// default), every key optional, each documented with its default in
// docs/agent.md ("Configuration"). An unknown key or a value of the wrong kind is
// an error naming the key and its line: a typo must not silently leave a
// default in force on every node.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/commands.h"
#include "common/layers.h"
#include "common/result.h"

namespace eacgm {

struct ServeConfig {
	std::string listen = "127.0.0.1:9464";
	// A file holding the bearer token every request must carry
	// (Authorization: Bearer TOKEN); "": none. Owner-only, read at start.
	std::string token_file;
	std::vector<std::string> layers = layer_names();
	std::vector<std::string> specs; // extra spec files
	// The agent's SQLite store (spans, measures, anomalies), written in
	// place and bounded; "": none. A previous one is moved to STORE.1.
	std::string store = "/var/lib/eacgm/eacgm.db";
	double store_max_mb = 1024;       // the file and its WAL; the oldest batches go first
	double store_max_age_hours = 168; // rows older than this go
	size_t top_functions = 100;       // per layer, functions with their own series; the rest "other"
	unsigned sample_hz = 100;         // Python stack samples per second of a thread's CPU time
	double gpu_hz = 1;                // NVML samples per second
	unsigned host_interval_ms = 1000; // host layer aggregation interval
	bool detect = true;
	double detect_fpr = 1e-4;
	double overhead_budget_pct = 2;
	int nice = 10; // the agent's threads' niceness (0-19), as record --nice
	// A collective or a wait on one in flight this long is a hang (a stderr
	// line, an events row, eacgm_hangs_in_flight); 0: off. Long enough for
	// a rank that starts late or saves a checkpoint.
	double hang_after_s = 300;
	unsigned ring_buffer_kb = 8192;
	bool bpf_stats = false; // the kernel's run-time accounting of eacgm's BPF programs
	// Shipping to ClickHouse (docs/clickhouse.md); url "": off.
	struct ClickHouse {
		std::string url;     // http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]
		std::string host;    // the node's name in every row; "": its host name
		std::string job;     // the job's name in every row, where the launcher's environment gives none
		std::string cluster; // remote_servers' name: ship through Distributed tables over its shards
		// Spans shipped besides the small rows (rounds, aggregates, ...):
		// "all", "around" (the seconds around an anomaly or a hang) or "none".
		std::string spans = "around";
		double keep_days = 0; // older day partitions dropped (a TTL where the server has them); 0: all kept
		bool operator==(const ClickHouse &) const = default;
	} clickhouse;
	// Which processes are traced: all of them must match where given.
	struct Filter {
		std::vector<std::string> comm;       // regular expressions (ECMAScript), matched whole
		std::vector<std::string> cgroup;     // prefixes of the cgroup v2 path ("/kubepods.slice")
		std::vector<uint64_t> pid_namespace; // inode numbers of pid namespaces (ls -L -i /proc/PID/ns/pid)
		bool operator==(const Filter &) const = default;
	} filter;
	// Every key equal: the shipped dist/eacgm.toml is checked to say the defaults.
	bool operator==(const ServeConfig &) const = default;
};

// `path` names the file in messages.
Result<ServeConfig> parse_serve_config(const std::string &text, const std::string &path);
// path empty: the default path when it exists, else the defaults.
Result<ServeConfig> load_serve_config(const std::string &path);

// The token in token_file: a regular file no one but its owner may read or
// write, one line of RFC 6750 token characters (at most 4096).
Result<std::string> read_token_file(const std::string &path);

} // namespace eacgm
