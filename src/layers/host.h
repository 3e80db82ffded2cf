// SPDX-License-Identifier: Apache-2.0
// The host layer: what the machine does to the traced job. Per traced
// process and interval, from bpf/host.bpf.c: scheduling delay and who held
// the CPU meanwhile, off-CPU time, switches, migrations, page faults, socket
// bytes and packets, per TCP connection retransmits and smoothed RTT.
// Machine-wide, from procfs: pressure stall information and NIC counters.
// And the layer's own cost (host_layer_cpu_pct).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/fs.h"
#include "common/model.h"
#include "common/result.h"
#include "eacgm/abi/host.h"
#include "layers/collector.h"

namespace eacgm {

struct HostOptions {
	unsigned interval_ms = 100;
	// Where procfs is read (root + "/proc/pressure/cpu", root + "/proc/net/dev"):
	// tests point it at recorded files.
	std::string root = "/";
	// Count the layer's BPF run time in host_layer_cpu_pct: turns the
	// kernel's run-time accounting on while the layer runs (two clock
	// reads more on every BPF program run on the node).
	bool bpf_stats = false;
};

// Loads and attaches bpf/host.bpf.c, sharing the traced-process map.
Result<std::unique_ptr<Collector>> open_host_collector(int traced_map_fd, const HostOptions &o);

// --- pieces, exposed for the unit tests

// One line of /proc/pressure/<resource>: "some avg10=0.65 avg60=0.27 avg300=0.39 total=519953939".
struct PsiLine {
	double avg10_pct = 0;
	uint64_t total_us = 0;
};
struct Psi {
	std::optional<PsiLine> some, full; // cpu had no "full" line before Linux 5.13
};
std::optional<Psi> parse_psi(std::string_view text);

// /proc/net/dev: per interface, the counters the host layer keeps.
struct NicCounters {
	uint64_t rx_bytes = 0, rx_packets = 0, rx_errors = 0, rx_dropped = 0;
	uint64_t tx_bytes = 0, tx_packets = 0, tx_errors = 0, tx_dropped = 0;
};
std::map<std::string, NicCounters> parse_net_dev(std::string_view text);

// "10.0.0.1:5201->10.0.0.2:40312", "[::1]:80->[::1]:51000".
std::string format_conn_key(const eacgm_host_conn_key &k);

// The machine-wide part: PSI and NIC counters under a root. The first call
// sets the baselines (PSI averages are emitted at once, deltas from the
// second call on). A counter that goes backwards (an interface re-created)
// starts a new baseline rather than a huge delta.
class HostSystemSampler {
public:
	explicit HostSystemSampler(std::string root = "/");
	void sample(uint64_t ts_ns, std::vector<Metric> &out);
	std::vector<std::string> take_warnings() { return std::exchange(warnings_, {}); }

private:
	std::array<RereadFile, 3> psi_files_; // cpu, memory, io
	RereadFile net_dev_;
	std::map<std::string, uint64_t> psi_totals_; // "cpu_some" -> total us
	std::map<std::string, NicCounters> nic_;     // previous sample
	bool warned_psi_ = false, warned_net_ = false;
	std::vector<std::string> warnings_;
};

} // namespace eacgm
