// SPDX-License-Identifier: Apache-2.0
// The Prometheus registry's text format and the metrics sink's arithmetic:
// exact text for known input, counts and buckets of known spans, the bound
// on functions per layer, a process's series gone with it.
#include <gtest/gtest.h>

#include <random>
#include <sys/stat.h>
#include <unistd.h>

#include "app/config.h"
#include "export/http.h"
#include "export/metrics.h"
#include "pipeline/cgroup.h"
#include "pipeline/intern.h"
#include "sinks/metrics.h"

using namespace eacgm;

namespace {

Span span(const std::string &layer, const std::string &name, uint64_t dur_ns, std::string ret_name = "",
	  uint64_t bytes = 0)
{
	Span s;
	s.layer = layer;
	s.name = name;
	s.dur_ns = dur_ns;
	s.ret_name = std::move(ret_name);
	s.bytes = bytes;
	return s;
}

// The sample lines of one family (its histogram's _bucket/_sum/_count too).
std::vector<std::string> lines_of(const std::string &text, const std::string &family)
{
	std::vector<std::string> out;
	size_t at = 0;
	while (at < text.size()) {
		size_t end = text.find('\n', at);
		std::string line = text.substr(at, end - at);
		at = end + 1;
		if (line.rfind(family, 0) == 0 &&
		    (line[family.size()] == '{' || line[family.size()] == ' ' || line[family.size()] == '_'))
			out.push_back(line);
	}
	return out;
}

} // namespace

TEST(MetricsRegistry, WritesTheTextFormat)
{
	MetricsRegistry r;
	r.declare("b_total", MetricsRegistry::counter, "Things\ncounted \\ here.");
	r.declare("a_gauge", MetricsRegistry::gauge, "A level.");
	r.declare("c_seconds", MetricsRegistry::histogram, "Durations.", {0.5, 1});
	r.declare("unused", MetricsRegistry::counter, "Never set: not written.");
	r.add("b_total", {{"k", "x\"y\\z\nw"}}, 2);
	r.add("b_total", {{"k", "x\"y\\z\nw"}}, 0.5);
	r.add("b_total", {{"k", "a"}}, 1);
	r.set("a_gauge", {}, 1e-7);
	r.set("a_gauge", {}, 3);
	r.observe("c_seconds", {{"f", "g"}}, 0.5); // on a bound: in its bucket (le is inclusive)
	r.observe("c_seconds", {{"f", "g"}}, 0.75);
	r.observe("c_seconds", {{"f", "g"}}, 2);
	r.add("a_gauge", {}, 5); // wrong kind: dropped
	EXPECT_EQ(r.render(),
		  "# HELP a_gauge A level.\n"
		  "# TYPE a_gauge gauge\n"
		  "a_gauge 3\n"
		  "# HELP b_total Things\\ncounted \\\\ here.\n"
		  "# TYPE b_total counter\n"
		  "b_total{k=\"a\"} 1\n"
		  "b_total{k=\"x\\\"y\\\\z\\nw\"} 2.5\n"
		  "# HELP c_seconds Durations.\n"
		  "# TYPE c_seconds histogram\n"
		  "c_seconds_bucket{f=\"g\",le=\"0.5\"} 1\n"
		  "c_seconds_bucket{f=\"g\",le=\"1\"} 2\n"
		  "c_seconds_bucket{f=\"g\",le=\"+Inf\"} 3\n"
		  "c_seconds_sum{f=\"g\"} 3.25\n"
		  "c_seconds_count{f=\"g\"} 3\n");
	EXPECT_EQ(r.series(), 4u); // the unused family has none
}

TEST(MetricsRegistry, DurationBucketsSpanOneMicrosecondToTenSeconds)
{
	const auto &b = duration_buckets();
	ASSERT_EQ(b.size(), 22u);
	EXPECT_DOUBLE_EQ(b.front(), 1e-6);
	EXPECT_DOUBLE_EQ(b[1], 2.5e-6);
	EXPECT_DOUBLE_EQ(b[2], 5e-6);
	EXPECT_DOUBLE_EQ(b.back(), 10);
	EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
}

TEST(MetricsSink, CountsCallsErrorsBytesAndDurations)
{
	MetricsRegistry r;
	MetricsSink sink(r);
	SpanBatch b;
	b.spans = {span("cuda", "cudaMalloc", 3000, "cudaErrorMemoryAllocation", 1024),
		   span("cuda", "cudaMalloc", 1000, "cudaSuccess", 2048), span("torch", "aten::mm", 2'000'000'000)};
	Span weighted = span("cuda", "cudaMalloc", 20'000'000'000, "cudaSuccess", 10);
	weighted.args["weight"] = 4.0; // a throttled probe's call stands for 4
	b.spans.push_back(weighted);
	b.anomalies.push_back(Anomaly{});
	b.anomalies.back().layer = "torch";
	b.anomalies.back().name = "aten::mm";
	b.anomalies.back().causes = nlohmann::json::array({{{"kind", "operator"}}});
	ASSERT_TRUE(sink.write(b));
	std::string text = r.render();
	EXPECT_EQ(lines_of(text, "eacgm_calls_total"),
		  (std::vector<std::string>{"eacgm_calls_total{layer=\"cuda\",function=\"cudaMalloc\"} 6",
					    "eacgm_calls_total{layer=\"torch\",function=\"aten::mm\"} 1"}));
	EXPECT_EQ(lines_of(text, "eacgm_call_errors_total"),
		  (std::vector<std::string>{"eacgm_call_errors_total{layer=\"cuda\",function=\"cudaMalloc\"} 1",
					    "eacgm_call_errors_total{layer=\"torch\",function=\"aten::mm\"} 0"}));
	EXPECT_EQ(lines_of(text, "eacgm_bytes_total")[0],
		  "eacgm_bytes_total{layer=\"cuda\",function=\"cudaMalloc\"} 3112");
	EXPECT_EQ(lines_of(text, "eacgm_anomalies_total"),
		  (std::vector<std::string>{
			  "eacgm_anomalies_total{layer=\"torch\",function=\"aten::mm\",cause=\"operator\"} 1"}));
	auto hist = lines_of(text, "eacgm_call_duration_seconds");
	// cudaMalloc: 1 us (on the first bound), 3 us (le 5e-06), 20 s x4 (above every bound).
	EXPECT_EQ(hist[0], "eacgm_call_duration_seconds_bucket{layer=\"cuda\",function=\"cudaMalloc\",le=\"1e-06\"} 1");
	EXPECT_EQ(hist[1],
		  "eacgm_call_duration_seconds_bucket{layer=\"cuda\",function=\"cudaMalloc\",le=\"2.5e-06\"} 1");
	EXPECT_EQ(hist[2], "eacgm_call_duration_seconds_bucket{layer=\"cuda\",function=\"cudaMalloc\",le=\"5e-06\"} 2");
	EXPECT_EQ(hist[21], "eacgm_call_duration_seconds_bucket{layer=\"cuda\",function=\"cudaMalloc\",le=\"10\"} 2");
	EXPECT_EQ(hist[22], "eacgm_call_duration_seconds_bucket{layer=\"cuda\",function=\"cudaMalloc\",le=\"+Inf\"} 6");
	EXPECT_EQ(hist[23], "eacgm_call_duration_seconds_sum{layer=\"cuda\",function=\"cudaMalloc\"} 80.000004");
	EXPECT_EQ(hist[24], "eacgm_call_duration_seconds_count{layer=\"cuda\",function=\"cudaMalloc\"} 6");
	// A second batch adds to the same series.
	SpanBatch again;
	again.spans = {span("torch", "aten::mm", 10)};
	ASSERT_TRUE(sink.write(again));
	EXPECT_EQ(lines_of(r.render(), "eacgm_calls_total")[1],
		  "eacgm_calls_total{layer=\"torch\",function=\"aten::mm\"} 2");
}

TEST(MetricsSink, CollectivesByRank)
{
	MetricsRegistry r;
	MetricsSink sink(r);
	SpanBatch b;
	for (int rank : {0, 1, 1}) {
		b.spans.push_back(span("nccl", "ncclAllReduce", 1000, "ncclSuccess", 4096));
		b.spans.back().args["rank"] = rank;
	}
	b.spans.push_back(span("nccl", "ncclAllReduce", 1000, "ncclInvalidArgument", 8)); // no communicator seen
	ASSERT_TRUE(sink.write(b));
	std::string text = r.render();
	EXPECT_EQ(lines_of(text, "eacgm_collective_calls_total"),
		  (std::vector<std::string>{
			  "eacgm_collective_calls_total{layer=\"nccl\",function=\"ncclAllReduce\",rank=\"0\"} 1",
			  "eacgm_collective_calls_total{layer=\"nccl\",function=\"ncclAllReduce\",rank=\"1\"} 2"}));
	EXPECT_EQ(lines_of(text, "eacgm_collective_bytes_total")[1],
		  "eacgm_collective_bytes_total{layer=\"nccl\",function=\"ncclAllReduce\",rank=\"1\"} 8192");
	EXPECT_EQ(lines_of(text, "eacgm_calls_total")[0],
		  "eacgm_calls_total{layer=\"nccl\",function=\"ncclAllReduce\"} 4");
}

TEST(MetricsSink, FunctionsPastTheTopNOfALayerAreOther)
{
	MetricsRegistry r;
	MetricsSink sink(r, 2);
	SpanBatch b;
	for (auto name : {"f1", "f2", "f3", "f4", "f1", "f3"})
		b.spans.push_back(span("python", name, 10));
	b.spans.push_back(span("cuda", "cudaFree", 10)); // another layer has its own two
	ASSERT_TRUE(sink.write(b));
	EXPECT_EQ(lines_of(r.render(), "eacgm_calls_total"),
		  (std::vector<std::string>{"eacgm_calls_total{layer=\"cuda\",function=\"cudaFree\"} 1",
					    "eacgm_calls_total{layer=\"python\",function=\"f1\"} 2",
					    "eacgm_calls_total{layer=\"python\",function=\"f2\"} 1",
					    "eacgm_calls_total{layer=\"python\",function=\"other\"} 3"}));
}

TEST(MetricsSink, MeasuresAreGaugesAndGoWithTheirProcess)
{
	MetricsRegistry r;
	MetricsSink sink(r);
	std::vector<Metric> m = {{1, "host", "sched_delay_ns", "", 42, 1500},
				 {1, "host", "sched_delay_ns", "", 43, 7},
				 {1, "gpu", "util_gpu_pct", "gpu0", 0, 99}};
	std::vector<Event> e(2);
	e[0].layer = e[1].layer = "gpu";
	e[0].name = e[1].name = "xid";
	ASSERT_TRUE(sink.measures(m, e));
	EXPECT_EQ(lines_of(r.render(), "eacgm_host_sched_delay_seconds"),
		  (std::vector<std::string>{"eacgm_host_sched_delay_seconds{pid=\"42\"} 1.5e-06",
					    "eacgm_host_sched_delay_seconds{pid=\"43\"} 7e-09"}));
	EXPECT_EQ(lines_of(r.render(), "eacgm_gpu_util_gpu_pct")[0], "eacgm_gpu_util_gpu_pct{key=\"gpu0\"} 99");
	EXPECT_EQ(lines_of(r.render(), "eacgm_events_total")[0], "eacgm_events_total{layer=\"gpu\",name=\"xid\"} 2");
	Process p;
	p.pid = 42;
	p.comm = "python3";
	ASSERT_TRUE(sink.process(p)); // running: kept, and described
	EXPECT_EQ(lines_of(r.render(), "eacgm_host_sched_delay_seconds").size(), 2u);
	p.comm = "trainer"; // exec'd: described anew
	p.cgroup = "/kubepods/burstable/pod6f1d2c3b-0a1b-4c2d-8e3f-0123456789ab/" + std::string(64, 'a');
	p.container_id = std::string(64, 'a');
	p.pod_uid = "6f1d2c3b-0a1b-4c2d-8e3f-0123456789ab";
	ASSERT_TRUE(sink.process(p));
	EXPECT_EQ(lines_of(r.render(), "eacgm_process_info"),
		  (std::vector<std::string>{"eacgm_process_info{pid=\"42\",comm=\"trainer\",cgroup=\"" + p.cgroup +
					    "\",container_id=\"" + p.container_id +
					    "\",pod_uid=\"6f1d2c3b-0a1b-4c2d-8e3f-0123456789ab\"} 1"}));
	p.end_ns = 5;
	ASSERT_TRUE(sink.process(p));
	EXPECT_EQ(lines_of(r.render(), "eacgm_host_sched_delay_seconds"),
		  (std::vector<std::string>{"eacgm_host_sched_delay_seconds{pid=\"43\"} 7e-09"}));
	EXPECT_TRUE(lines_of(r.render(), "eacgm_process_info").empty());
}

TEST(MetricsSink, LossCountsAreTotals)
{
	MetricsRegistry r;
	MetricsSink sink(r);
	ASSERT_TRUE(sink.drops({{"uprobe", "ring_buffer_full", 5}}));
	ASSERT_TRUE(sink.drops({{"uprobe", "ring_buffer_full", 7}})); // the total so far, not an increment
	EXPECT_EQ(lines_of(r.render(), "eacgm_records_lost_total")[0],
		  "eacgm_records_lost_total{layer=\"uprobe\",reason=\"ring_buffer_full\"} 7");
}

TEST(ParseListen, NeedsHostAndPort)
{
	auto ok = parse_listen("127.0.0.1:9464");
	ASSERT_TRUE(ok);
	EXPECT_EQ(ok->first, "127.0.0.1");
	EXPECT_EQ(ok->second, 9464);
	for (auto bad : {"9464", ":9464", "localhost:", "h:99999", "h:12a", "h:-1"}) {
		auto r = parse_listen(bad);
		ASSERT_FALSE(r) << bad;
		EXPECT_EQ(r.error().kind, ErrorKind::BadInput) << bad;
	}
}

// A configuration or token file that is not there is not found; a token
// others may read is refused as bad input (its mode is eacgm's own check).
TEST(ServeConfig, FilesNotThereOrNotSafe)
{
	auto c = load_serve_config("/nonexistent-eacgm/eacgm.toml");
	ASSERT_FALSE(c);
	EXPECT_EQ(c.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(c.error().message,
		  "cannot read the configuration /nonexistent-eacgm/eacgm.toml: No such file or "
		  "directory (give another with --config)");
	auto t = read_token_file("/nonexistent-eacgm/token");
	ASSERT_FALSE(t);
	EXPECT_EQ(t.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(
		t.error().message,
		"token_file /nonexistent-eacgm/token: No such file or directory; write the token into it (chmod 600)");
	char path[] = "/tmp/eacgm_token_XXXXXX";
	int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(write(fd, "secret\n", 7), 7);
	close(fd);
	ASSERT_EQ(chmod(path, 0644), 0);
	auto open = read_token_file(path);
	unlink(path);
	ASSERT_FALSE(open);
	EXPECT_EQ(open.error().kind, ErrorKind::BadInput);
	EXPECT_EQ(open.error().message,
		  "token_file " + std::string(path) + ": group or others may read or write it (mode 0644); chmod 600 " +
			  path);
}

TEST(ServeConfig, DefaultsWithoutAFile)
{
	auto c = parse_serve_config("", "c.toml");
	ASSERT_TRUE(c) << c.error().message;
	EXPECT_EQ(c->listen, "127.0.0.1:9464");
	EXPECT_EQ(c->token_file, "");
	EXPECT_EQ(c->layers.size(), 7u);
	EXPECT_EQ(c->top_functions, 100u);
	EXPECT_EQ(c->sample_hz, 100u);
	EXPECT_EQ(c->store, "/var/lib/eacgm/eacgm.db");
	EXPECT_DOUBLE_EQ(c->store_max_mb, 1024);
	EXPECT_DOUBLE_EQ(c->store_max_age_hours, 168);
	EXPECT_DOUBLE_EQ(c->hang_after_s, 300);
	EXPECT_EQ(c->nice, 10);
	EXPECT_TRUE(c->filter.comm.empty());
}

TEST(ServeConfig, EveryKeyRead)
{
	auto c = parse_serve_config(R"(listen = "0.0.0.0:1234"
layers = ["cuda", "python"]
specs = ["/etc/eacgm/mine.json"]
store = "/srv/eacgm.db"
store_max_mb = 64
store_max_age_hours = 0.5
top_functions = 7
sample_hz = 0
gpu_hz = 0.5
host_interval_ms = 250
detect = false
detect_fpr = 0.001
overhead_budget_pct = 1.5
nice = 0
hang_after_s = 42
ring_buffer_kb = 1024
bpf_stats = true
token_file = "/etc/eacgm/token"
[filter]
comm = ["python.*", "trainer"]
cgroup = ["/kubepods.slice"]
pid_namespace = [4026531836]
)",
				    "c.toml");
	ASSERT_TRUE(c) << c.error().message;
	EXPECT_EQ(c->listen, "0.0.0.0:1234");
	EXPECT_EQ(c->layers, (std::vector<std::string>{"cuda", "python"}));
	EXPECT_EQ(c->specs, (std::vector<std::string>{"/etc/eacgm/mine.json"}));
	EXPECT_EQ(c->store, "/srv/eacgm.db");
	EXPECT_DOUBLE_EQ(c->store_max_mb, 64);
	EXPECT_DOUBLE_EQ(c->store_max_age_hours, 0.5);
	EXPECT_EQ(c->top_functions, 7u);
	EXPECT_EQ(c->sample_hz, 0u);
	EXPECT_DOUBLE_EQ(c->gpu_hz, 0.5);
	EXPECT_EQ(c->host_interval_ms, 250u);
	EXPECT_FALSE(c->detect);
	EXPECT_DOUBLE_EQ(c->detect_fpr, 0.001);
	EXPECT_DOUBLE_EQ(c->overhead_budget_pct, 1.5);
	EXPECT_EQ(c->nice, 0);
	EXPECT_DOUBLE_EQ(c->hang_after_s, 42);
	EXPECT_EQ(c->ring_buffer_kb, 1024u);
	EXPECT_TRUE(c->bpf_stats);
	EXPECT_EQ(c->token_file, "/etc/eacgm/token");
	EXPECT_EQ(c->filter.comm, (std::vector<std::string>{"python.*", "trainer"}));
	EXPECT_EQ(c->filter.cgroup, (std::vector<std::string>{"/kubepods.slice"}));
	EXPECT_EQ(c->filter.pid_namespace, (std::vector<uint64_t>{4026531836ull}));
}

TEST(ServeConfig, ErrorsNameTheKeyAndLine)
{
	auto expect = [](const std::string &text, const std::string &message) {
		auto c = parse_serve_config(text, "c.toml");
		ASSERT_FALSE(c) << text;
		EXPECT_EQ(c.error().message, message) << text;
		EXPECT_EQ(c.error().kind, ErrorKind::BadInput) << text; // the clickhouse.* ones kept through context
	};
	expect("\nlisten_on = \"x\"\n",
	       "c.toml:2: listen_on: unknown key; the keys here are bpf_stats, clickhouse, detect, detect_fpr, filter, "
	       "gpu_hz, "
	       "hang_after_s, host_interval_ms, layers, listen, nice, overhead_budget_pct, ring_buffer_kb, sample_hz, "
	       "specs, "
	       "store, "
	       "store_max_age_hours, store_max_mb, token_file, top_functions");
	expect("top_functions = 1.5\n", "c.toml:1: top_functions must be a whole number");
	expect("top_functions = 0\n", "c.toml:1: top_functions must be from 1 to 100000");
	expect("nice = -5\n", "c.toml:1: nice must be from 0 to 19");
	expect("detect = 1\n", "c.toml:1: detect must be true or false");
	expect("layers = \"cuda\"\n", "c.toml:1: layers must be an array of strings, e.g. [\"a\", \"b\"]");
	expect("filter = 3\n", "c.toml:1: filter must be a table: [filter]");
	expect("[clickhouse]\nurl = \"ch:8123\"\n",
	       "c.toml: clickhouse.url: ClickHouse address 'ch:8123' is not of the form "
	       "http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE] (e.g. http://ch.example:8123/prod)");
	expect("[clickhouse]\nshard = 1\n",
	       "c.toml:2: clickhouse.shard: unknown key; the keys here are clickhouse.cluster, clickhouse.host, "
	       "clickhouse.job, clickhouse.keep_days, clickhouse.spans, clickhouse.url");
	expect("[clickhouse]\nspans = \"some\"\n",
	       "c.toml: clickhouse.spans: 'some' is not one of \"all\", \"around\" (the seconds around an anomaly or "
	       "a hang) or \"none\"");
	expect("[clickhouse]\nkeep_days = -1\n", "c.toml:2: clickhouse.keep_days must be from 0 to 36500");
	expect("[clickhouse]\ncluster = \"a-b\"\n",
	       "c.toml: clickhouse.cluster: ClickHouse cluster 'a-b' is not a name of letters, digits and underscores, "
	       "as remote_servers names it");
	expect("[filter]\npid_namespace = [\"x\"]\n",
	       "c.toml:2: filter.pid_namespace must be an array of whole numbers (pid namespace inodes)");
	expect("[filter]\n\n\ncgroups = []\n",
	       "c.toml:4: filter.cgroups: unknown key; the keys here are filter.cgroup, filter.comm, "
	       "filter.pid_namespace");
}

TEST(Cgroup, ContainerAndPodFromThePath)
{
	std::string id = "4c0b3f5e1d2a" + std::string(52, '9');
	struct Case {
		std::string path, container, pod;
	} cases[] = {
		{"/user.slice/user-0.slice/session-3.scope", "", ""},
		{"/system.slice/docker-" + id + ".scope", id, ""},
		{"/docker/" + id, id, ""},
		{"/kubepods.slice/kubepods-burstable.slice/"
		 "kubepods-burstable-pod6f1d2c3b_0a1b_4c2d_8e3f_0123456789ab.slice/"
		 "cri-containerd-" +
			 id + ".scope",
		 id, "6f1d2c3b-0a1b-4c2d-8e3f-0123456789ab"},
		{"/kubepods/besteffort/pod6f1d2c3b-0a1b-4c2d-8e3f-0123456789ab/" + id, id,
		 "6f1d2c3b-0a1b-4c2d-8e3f-0123456789ab"},
		{"/kubepods/pod6f1d2c3b-0a1b-4c2d-8e3f-0123456789ab", "", "6f1d2c3b-0a1b-4c2d-8e3f-0123456789ab"},
		{"/x/" + id + "0", "", ""},             // 65 hex digits: not an id
		{"/x/" + std::string(64, 'A'), "", ""}, // upper case: not how runtimes write ids
		{"/podcast/notauid-0000", "", ""},      // "pod" without a uid
	};
	for (auto &c : cases) {
		CgroupInfo i = parse_cgroup_path(c.path);
		EXPECT_EQ(i.path, c.path);
		EXPECT_EQ(i.container_id, c.container) << c.path;
		EXPECT_EQ(i.pod_uid, c.pod) << c.path;
	}
}

TEST(MetricsSink, GaugesInBaseUnitsSpelledOut)
{
	EXPECT_EQ(gauge_of("host", "offcpu_ns"), (std::pair<std::string, double>{"eacgm_host_offcpu_seconds", 1e9}));
	EXPECT_EQ(gauge_of("host", "psi_io_some_stall_us"),
		  (std::pair<std::string, double>{"eacgm_host_psi_io_some_stall_seconds", 1e6}));
	EXPECT_EQ(gauge_of("gpu", "pcie_rx_bytes_per_s"),
		  (std::pair<std::string, double>{"eacgm_gpu_pcie_rx_bytes_per_second", 1}));
	EXPECT_EQ(gauge_of("gpu", "util_gpu_pct"), (std::pair<std::string, double>{"eacgm_gpu_util_gpu_pct", 1}));
	EXPECT_EQ(gauge_of("host", "sched_waits"), (std::pair<std::string, double>{"eacgm_host_sched_waits", 1}));
}

// Typed spans count as their Spans: calls, errors (a cudaError_t's names),
// bytes, durations and weights per function, collectives per rank and the
// rounds' skews and last ranks, the same text for a batch given either way.
TEST(MetricsSink, TypedSpansCountAsTheirSpans)
{
	std::mt19937_64 rng(5);
	for (const char *layer : {"cuda", "gloo"}) {
		auto specs = load_builtin_spec(layer);
		ASSERT_TRUE(specs) << specs.error().message;
		Interner names;
		SpanBatch typed;
		typed.typed = {&*specs, &names, nullptr, {}, {}};
		for (int k = 0; k < 3000; k++) {
			TypedSpan t{.start_ns = 1'000'000 + uint64_t(k / 2) * 1000 + rng() % 500,
				    .dur_ns = rng() % 5'000'000,
				    .ret = int64_t(rng() % 4),
				    .bytes = rng() % 65536,
				    .weight = k % 7 == 3 ? 12.5 : 1.0,
				    .pid = 100 + uint32_t(k % 2),
				    .tid = 7,
				    .spec_id = uint32_t(rng() % specs->probes.size())};
			// gloo: ranks 0 and 1 of a group of 2 (some of 1), the
			// same collectives in turn.
			for (auto &a : t.args)
				a = rng() % 64;
			if (std::string(layer) == "gloo")
				for (size_t i = 0; i < specs->probes[t.spec_id].args.size(); i++) {
					const std::string &name = specs->probes[t.spec_id].args[i].name;
					if (name == "rank")
						t.args[i] = uint64_t(k % 2);
					else if (name == "nranks")
						t.args[i] = k % 11 == 0 ? 1 : 2;
					else if (name == "seq")
						t.args[i] = uint64_t(k / 2);
				}
			typed.typed.push_back(t);
		}
		SpanBatch spans;
		for (size_t i = 0; i < typed.typed.size(); i++)
			spans.spans.push_back(span_at(typed.typed, i));
		MetricsRegistry a, b;
		MetricsSink as_spans(a), as_typed(b);
		ASSERT_TRUE(as_spans.write(spans));
		ASSERT_TRUE(as_typed.write(typed));
		const std::string text = a.render();
		EXPECT_EQ(b.render(), text) << layer;
		EXPECT_NE(text.find("eacgm_calls_total{layer=\"" + std::string(layer) + "\""), std::string::npos);
		if (std::string(layer) == "cuda")
			EXPECT_NE(text.find("eacgm_call_errors_total{layer=\"cuda\",function=\"cudaMalloc\"} "),
				  std::string::npos);
		else
			EXPECT_FALSE(lines_of(text, "eacgm_collective_last_arrivals_total").empty());
	}
}
