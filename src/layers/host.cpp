// SPDX-License-Identifier: Apache-2.0
#include "layers/host.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/layers.h"
#include "common/text.h"
#include "host.skel.h"
#include "common/fd.h"
#include "probe/links.h"
#include "probe/skeleton.h"

namespace eacgm {

namespace {

uint64_t clock_ns(clockid_t c)
{
	timespec ts{};
	clock_gettime(c, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

Metric host_metric(uint64_t ts, const char *name, uint32_t pid, std::string key, double value)
{
	return Metric{ts, layer::host, name, std::move(key), pid, value};
}

} // namespace

// Read ten times a second per resource: words are taken in place, numbers
// with from_chars (the stream-based parse was a third of the host
// sampler's time).
std::optional<Psi> parse_psi(std::string_view text)
{
	Psi psi;
	while (!text.empty()) {
		std::string_view line = next_line(text);
		std::string_view kind = next_word(line);
		if (kind != "some" && kind != "full")
			continue;
		PsiLine l;
		bool avg = false, total = false;
		for (std::string_view field = next_word(line); !field.empty(); field = next_word(line)) {
			size_t eq = field.find('=');
			if (eq == std::string_view::npos)
				continue;
			std::string_view k = field.substr(0, eq), v = field.substr(eq + 1);
			if (k == "avg10" && !(avg = parse_number(v, l.avg10_pct)))
				return std::nullopt;
			if (k == "total" && !(total = parse_number(v, l.total_us)))
				return std::nullopt;
		}
		if (!avg || !total)
			return std::nullopt;
		(kind == "some" ? psi.some : psi.full) = l;
	}
	if (!psi.some)
		return std::nullopt;
	return psi;
}

std::map<std::string, NicCounters> parse_net_dev(std::string_view text)
{
	std::map<std::string, NicCounters> out;
	while (!text.empty()) {
		std::string_view line = next_line(text);
		size_t colon = line.find(':');
		if (colon == std::string_view::npos)
			continue; // the two header lines
		std::string_view name = line.substr(0, colon);
		name.remove_prefix(std::min(name.find_first_not_of(' '), name.size()));
		line.remove_prefix(colon + 1);
		uint64_t v[16];
		int n = 0;
		while (n < 16 && parse_number(next_word(line), v[n]))
			n++;
		if (name.empty() || n < 16)
			continue;
		// rx: bytes packets errs drop fifo frame compressed multicast,
		// tx: bytes packets errs drop fifo colls carrier compressed
		out[std::string(name)] = NicCounters{v[0], v[1], v[2], v[3], v[8], v[9], v[10], v[11]};
	}
	return out;
}

std::string format_conn_key(const eacgm_host_conn_key &k)
{
	char s[INET6_ADDRSTRLEN] = "?", d[INET6_ADDRSTRLEN] = "?";
	int af = k.family == 10 ? AF_INET6 : AF_INET;
	inet_ntop(af, k.saddr, s, sizeof(s));
	inet_ntop(af, k.daddr, d, sizeof(d));
	auto addr = [af](const char *a) { return af == AF_INET6 ? "[" + std::string(a) + "]" : std::string(a); };
	return addr(s) + ":" + std::to_string(k.sport) + "->" + addr(d) + ":" + std::to_string(k.dport);
}

static std::string without_trailing_slashes(std::string root)
{
	while (!root.empty() && root.back() == '/')
		root.pop_back();
	return root;
}

// The resources of psi_files_, in its order.
static constexpr const char *kPsiResources[] = {"cpu", "memory", "io"};

HostSystemSampler::HostSystemSampler(std::string root)
	: psi_files_{RereadFile(without_trailing_slashes(root) + "/proc/pressure/" + kPsiResources[0]),
		     RereadFile(without_trailing_slashes(root) + "/proc/pressure/" + kPsiResources[1]),
		     RereadFile(without_trailing_slashes(root) + "/proc/pressure/" + kPsiResources[2])},
	  net_dev_(without_trailing_slashes(root) + "/proc/net/dev")
{}

void HostSystemSampler::sample(uint64_t ts, std::vector<Metric> &out)
{
	static_assert(std::size(kPsiResources) == std::tuple_size_v<decltype(psi_files_)>);
	for (size_t i = 0; i < psi_files_.size(); i++) {
		const char *res = kPsiResources[i];
		const std::string *text = psi_files_[i].read();
		auto psi = text ? parse_psi(*text) : std::nullopt;
		if (!psi) {
			if (!warned_psi_)
				warnings_.push_back("host: cannot read " + psi_files_[i].path() +
						    " (a kernel without CONFIG_PSI, or booted with psi=0): pressure "
						    "stall information is not recorded");
			warned_psi_ = true;
			continue;
		}
		for (auto [kind, line] : {std::pair{"some", psi->some}, std::pair{"full", psi->full}}) {
			if (!line)
				continue;
			std::string base = std::string("psi_") + res + "_" + kind;
			out.push_back(host_metric(ts, (base + "_avg10_pct").c_str(), 0, "", line->avg10_pct));
			auto prev = psi_totals_.find(base);
			if (prev != psi_totals_.end() && line->total_us >= prev->second)
				out.push_back(host_metric(ts, (base + "_stall_us").c_str(), 0, "",
							  double(line->total_us - prev->second)));
			psi_totals_[base] = line->total_us;
		}
	}
	// /proc/net/dev rather than /sys/class/net/*/statistics/*: the same
	// counters (both come from dev_get_stats), one read instead of eight
	// per interface, every interval.
	const std::string *text = net_dev_.read();
	if (!text) {
		if (!warned_net_)
			warnings_.push_back("host: cannot read " + net_dev_.path() + ": NIC counters are not recorded");
		warned_net_ = true;
		return;
	}
	auto now = parse_net_dev(*text);
	for (auto &[ifname, c] : now) {
		auto it = nic_.find(ifname);
		if (it == nic_.end())
			continue;
		const NicCounters &p = it->second;
		std::pair<const char *, std::pair<uint64_t, uint64_t>> fields[] = {
			{"nic_rx_bytes", {c.rx_bytes, p.rx_bytes}},    {"nic_rx_packets", {c.rx_packets, p.rx_packets}},
			{"nic_rx_errors", {c.rx_errors, p.rx_errors}}, {"nic_rx_dropped", {c.rx_dropped, p.rx_dropped}},
			{"nic_tx_bytes", {c.tx_bytes, p.tx_bytes}},    {"nic_tx_packets", {c.tx_packets, p.tx_packets}},
			{"nic_tx_errors", {c.tx_errors, p.tx_errors}}, {"nic_tx_dropped", {c.tx_dropped, p.tx_dropped}},
		};
		bool reset = false;
		for (auto &f : fields)
			reset |= f.second.first < f.second.second;
		if (reset)
			continue; // re-created: a new baseline
		for (auto &f : fields)
			out.push_back(host_metric(ts, f.first, 0, ifname, double(f.second.first - f.second.second)));
	}
	nic_ = std::move(now);
}

namespace {

class HostCollector final : public Collector {
public:
	explicit HostCollector(const HostOptions &o) : o_(o), sys_(o.root) {}
	Result<void> open(int traced_map_fd);
	const char *layer() const override { return layer::host; }
	void collect(uint64_t now_ns, const std::set<uint32_t> &traced, std::vector<Metric> &metrics,
		     std::vector<Event> &events) override;
	void stop() override { stopping_ = true; }
	uint64_t next_due_ns() const override { return interval_start_ + uint64_t(o_.interval_ms) * 1000000; }
	std::vector<std::string> take_warnings() override;

private:
	void drain(unsigned g, uint64_t ts, const std::set<uint32_t> &traced, std::vector<Metric> &out);
	uint64_t bpf_run_time_ns() const;

	HostOptions o_;
	HostSystemSampler sys_;
	Skeleton<struct host_bpf> skel_ = no_skeleton<struct host_bpf>();
	LinkSet links_; // after the skeleton: the links go first
	UniqueFd stats_fd_;
	std::vector<std::string> warnings_;
	bool stopping_ = false;

	uint64_t interval_start_ = 0; // CLOCK_MONOTONIC
	int pending_ = -1;            // a generation flipped out, to read at the next collect
	uint64_t pending_ts_ = 0;
	uint64_t bpf_ns_at_start_ = 0;
	uint64_t collect_cpu_ns_ = 0; // this interval's collect() CPU time so far
};

Result<void> HostCollector::open(int traced_map_fd)
{
	skel_ = open_skeleton(host_bpf__open, host_bpf__destroy);
	if (!skel_)
		return errno_error(errno, "cannot open the host BPF object");
	if (int err = bpf_map__reuse_fd(skel_->maps.traced_tgids, traced_map_fd))
		return errno_error(-err, "cannot share the traced-process map with the host layer");
	// A tracepoint this kernel lacks (sock_send_length and sock_recv_length
	// came with Linux 6.3) leaves its metrics out rather than the layer.
	struct btf *vmlinux = btf__load_vmlinux_btf();
	if (!vmlinux)
		return make_error(
			ErrorKind::NotFound,
			"the host layer needs the kernel's BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF)");
	struct bpf_program *prog;
	bpf_object__for_each_program(prog, skel_->obj)
	{
		std::string sec = bpf_program__section_name(prog);
		if (sec.rfind("tp_btf/", 0) != 0)
			continue;
		std::string tp = sec.substr(7);
		if (btf__find_by_name_kind(vmlinux, ("btf_trace_" + tp).c_str(), BTF_KIND_TYPEDEF) < 0) {
			bpf_program__set_autoload(prog, false);
			warnings_.push_back("host: this kernel has no " + tp + " tracepoint: what " +
					    bpf_program__name(prog) + " measures is not recorded");
		}
	}
	btf__free(vmlinux);
	if (int err = host_bpf__load(skel_.get()))
		return errno_error(-err, "cannot load the host BPF programs",
				   " (run as root; the kernel needs BTF and tp_btf, Linux 5.11+)");
	bpf_object__for_each_program(prog, skel_->obj)
	{
		std::string sec = bpf_program__section_name(prog);
		if (!bpf_program__autoload(prog) || sec.rfind("tp_btf/", 0) != 0)
			continue;
		struct bpf_link *l = bpf_program__attach(prog);
		if (!l)
			return errno_error(errno, "cannot attach the host layer's " + sec + " program");
		links_.add(l);
	}
	// BPF run time is counted only while someone holds this fd (or the
	// kernel.bpf_stats_enabled sysctl is on): held while the layer runs,
	// when asked (it costs every BPF program run on the node two clock
	// reads). Without it the programs' run time reads 0.
	if (o_.bpf_stats) {
		int stats = bpf_enable_stats(BPF_STATS_RUN_TIME);
		stats_fd_.reset(stats);
		if (stats < 0)
			warnings_.push_back(std::string("host: cannot enable BPF run-time statistics (") +
					    std::strerror(-stats) + "): host_layer_cpu_pct counts the collector only");
	}
	interval_start_ = clock_ns(CLOCK_MONOTONIC);
	bpf_ns_at_start_ = bpf_run_time_ns();
	std::vector<Metric> baseline;
	sys_.sample(interval_start_, baseline);
	return {};
}

uint64_t HostCollector::bpf_run_time_ns() const
{
	uint64_t total = 0;
	struct bpf_program *prog;
	bpf_object__for_each_program(prog, skel_->obj)
	{
		int fd = bpf_program__fd(prog);
		if (fd < 0)
			continue;
		bpf_prog_info info{};
		uint32_t len = sizeof(info);
		if (!bpf_obj_get_info_by_fd(fd, &info, &len))
			total += info.run_time_ns;
	}
	return total;
}

// Reads every entry of a map and deletes it: in batches (a syscall per 256
// entries, instead of three per entry: at ten intervals a second that was
// most of the collector's syscalls), or entry by entry on a kernel without
// batch operations on hash maps (before 5.6).
template <class K, class V>
void drain_map(const struct bpf_map *map, const std::function<void(const K &, const V &)> &f)
{
	int fd = bpf_map__fd(map);
	constexpr uint32_t kBatch = 256;
	std::vector<K> keys(kBatch);
	std::vector<V> values(kBatch);
	uint32_t token = 0; // a hash map's batches go by bucket
	for (void *in = nullptr;; in = &token) {
		uint32_t n = kBatch;
		int err = bpf_map_lookup_and_delete_batch(fd, in, &token, keys.data(), values.data(), &n, nullptr);
		for (uint32_t i = 0; i < n && i < kBatch; i++) // read and deleted, even when it failed after them
			f(keys[i], values[i]);
		if (err == -ENOENT)
			return; // that was the last batch
		if (err)
			break; // the rest entry by entry, below
	}
	K key, next;
	std::vector<K> left;
	for (void *prev = nullptr; !bpf_map_get_next_key(fd, prev, &next); prev = &key) {
		left.push_back(next);
		key = next;
	}
	for (auto &k : left) {
		V v;
		if (!bpf_map_lookup_elem(fd, &k, &v))
			f(k, v);
		bpf_map_delete_elem(fd, &k);
	}
}

void HostCollector::drain(unsigned g, uint64_t ts, const std::set<uint32_t> &traced, std::vector<Metric> &out)
{
	std::map<uint32_t, eacgm_host_stats> stats;
	drain_map<uint32_t, eacgm_host_stats>(g ? skel_->maps.stats1 : skel_->maps.stats0,
					      [&](const uint32_t &pid, const eacgm_host_stats &s) { stats[pid] = s; });
	for (uint32_t pid : traced)
		stats.try_emplace(pid); // quiet processes get zeros, not a stale counter
	for (auto &[pid, s] : stats) {
		std::pair<const char *, uint64_t> values[] = {
			{"sched_delay_ns", s.sched_delay_ns},
			{"sched_delay_max_ns", s.sched_delay_max_ns},
			{"sched_waits", s.sched_waits},
			{"offcpu_ns", s.offcpu_ns},
			{"switches_voluntary", s.switches_voluntary},
			{"switches_involuntary", s.switches_involuntary},
			{"migrations", s.migrations},
			{"page_faults", s.faults_major + s.faults_minor},
			{"page_faults_major", s.faults_major},
			{"page_faults_minor", s.faults_minor},
			{"net_tx_bytes", s.tx_bytes},
			{"net_rx_bytes", s.rx_bytes},
			{"net_tx_packets", s.tx_packets},
			{"net_rx_packets", s.rx_packets},
		};
		for (auto [name, v] : values)
			out.push_back(host_metric(ts, name, pid, "", double(v)));
	}
	drain_map<eacgm_host_interf_key, eacgm_host_interf>(
		g ? skel_->maps.interf1 : skel_->maps.interf0,
		[&](const eacgm_host_interf_key &k, const eacgm_host_interf &v) {
			std::string comm(v.comm, strnlen(v.comm, sizeof(v.comm)));
			out.push_back(host_metric(ts, "interference_ns", k.tgid,
						  comm + ":" + std::to_string(k.interferer), double(v.ns)));
		});
	drain_map<eacgm_host_conn_key, eacgm_host_conn>(
		g ? skel_->maps.conns1 : skel_->maps.conns0,
		[&](const eacgm_host_conn_key &k, const eacgm_host_conn &c) {
			std::string key = format_conn_key(k);
			out.push_back(host_metric(ts, "tcp_retransmits", k.tgid, key, double(c.retransmits)));
			if (c.srtt_samples)
				out.push_back(host_metric(ts, "tcp_srtt_us", k.tgid, key,
							  double(c.srtt_us_sum) / double(c.srtt_samples)));
		});
}

// Interval aggregation by two map generations rather than read-and-delete
// of one map: a program that increments an entry between our read and our
// delete would lose its update, and on a busy machine that window is hit
// constantly. So the programs write the generation `gen` names; at an
// interval's end this flips `gen`, and reads and clears the old generation
// at the next interval's end, just before the next flip, when no program
// that looked up `gen` before the first flip can still be running (a
// tracepoint program runs for microseconds, with preemption off). One
// wake-up per interval does both. The metrics carry the flip's time.
void HostCollector::collect(uint64_t now, const std::set<uint32_t> &traced, std::vector<Metric> &metrics,
			    std::vector<Event> &)
{
	uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	if (stopping_ || now >= next_due_ns()) {
		if (pending_ >= 0) {
			drain(pending_, pending_ts_, traced, metrics);
			pending_ = -1;
		}
		unsigned old = __atomic_load_n(&skel_->bss->gen, __ATOMIC_RELAXED);
		__atomic_store_n(&skel_->bss->gen, old ^ 1, __ATOMIC_SEQ_CST);
		pending_ = old;
		pending_ts_ = now;
		sys_.sample(now, metrics);
		uint64_t bpf_ns = bpf_run_time_ns();
		uint64_t cpu = collect_cpu_ns_ + clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
		if (now > interval_start_)
			metrics.push_back(host_metric(now, "host_layer_cpu_pct", 0, "",
						      100.0 * double(bpf_ns - bpf_ns_at_start_ + cpu) /
							      double(now - interval_start_)));
		interval_start_ = now;
		bpf_ns_at_start_ = bpf_ns;
		collect_cpu_ns_ = 0;
		cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		if (stopping_) {
			// No later collect: give programs that saw the old `gen`
			// a moment to finish, then read it now.
			usleep(2000);
			drain(pending_, pending_ts_, traced, metrics);
			pending_ = -1;
		}
	}
	collect_cpu_ns_ += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
}

std::vector<std::string> HostCollector::take_warnings()
{
	auto w = std::exchange(warnings_, {});
	for (auto &s : sys_.take_warnings())
		w.push_back(std::move(s));
	return w;
}

} // namespace

Result<std::unique_ptr<Collector>> open_host_collector(int traced_map_fd, const HostOptions &o)
{
	if (o.interval_ms == 0)
		return make_error(ErrorKind::BadInput, "--host-interval-ms must be at least 1");
	auto c = std::make_unique<HostCollector>(o);
	if (auto r = c->open(traced_map_fd); !r)
		return r.error();
	return std::unique_ptr<Collector>(std::move(c));
}

} // namespace eacgm
