// SPDX-License-Identifier: Apache-2.0
// The gpu layer against the NVML stand-in (tests/nvml): a scripted scenario
// with two devices, value steps, a process of this test and one of another,
// an XID, a double-bit ECC error, an unsupported fan and a device that falls
// off the bus. Every value sampled is checked against the script at the
// sample's time (relative to the stand-in's origin, its nvmlInit_v2).
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "layers/gpu.h"

using namespace eacgm;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;
constexpr int64_t kStepMs = 450; // samples are 100 ms apart: none falls near it
constexpr int64_t kGuardMs = 15; // a sample this close to a step may hold either side
constexpr int64_t kLostMs = 700;

json scenario()
{
	json gpu0 = {
		{"name", "Stand-in A100"},
		{"uuid", "GPU-11111111-2222-3333-4444-555555555555"},
		{"not_supported", {"nvmlDeviceGetFanSpeed"}},
		{"timeline",
		 {{{"at_ms", 0},
		   {"util_gpu", 10},
		   {"util_mem", 5},
		   {"mem_used", 1 * GiB},
		   {"mem_total", 40 * GiB},
		   {"temp", 40},
		   {"power_mw", 95500},
		   {"power_limit_mw", 400000},
		   {"clock_sm", 1410},
		   {"clock_mem", 1215},
		   {"throttle", 0x1},
		   {"pcie_tx_kbps", 1000},
		   {"pcie_rx_kbps", 2000},
		   {"ecc_corrected", 0},
		   {"ecc_uncorrected", 0},
		   {"nvlink_tx_kib_per_s", 2000000},
		   {"nvlink_rx_kib_per_s", 1000000}},
		  {{"at_ms", kStepMs},
		   {"util_gpu", 95},
		   {"util_mem", 60},
		   {"mem_used", 30 * GiB},
		   {"temp", 71},
		   {"power_mw", 310250},
		   {"clock_sm", 1395},
		   {"throttle", 0x24},
		   {"pcie_tx_kbps", 250000},
		   {"ecc_corrected", 3},
		   {"nvlink_tx_kib_per_s", 4000000}}}},
		{"processes",
		 {{{"pid", "self"},
		   {"timeline",
		    {{{"at_ms", 0}, {"mem_used", 512 * MiB}, {"sm_util", 20}, {"mem_util", 7}},
		     {{"at_ms", kStepMs}, {"mem_used", 2 * GiB}, {"sm_util", 85}, {"mem_util", 40}}}}},
		  {{"pid", 1},
		   {"timeline", {{{"at_ms", 0}, {"mem_used", 256 * MiB}, {"sm_util", 5}, {"mem_util", 1}}}}}}},
		{"events", {{{"at_ms", 300}, {"xid", 13}}, {{"at_ms", 600}, {"ecc_double_bit", true}}}},
	};
	json gpu1 = {
		{"name", "Stand-in T4"},
		{"uuid", "GPU-66666666-7777-8888-9999-000000000000"},
		{"not_supported", {"nvmlDeviceGetFieldValues", "nvmlDeviceGetTotalEccErrors"}},
		{"lost_at_ms", kLostMs},
		{"timeline",
		 {{{"at_ms", 0},
		   {"util_gpu", 50},
		   {"util_mem", 25},
		   {"mem_used", 2 * GiB},
		   {"mem_total", 16 * GiB},
		   {"temp", 55},
		   {"power_mw", 70000},
		   {"power_limit_mw", 70000},
		   {"clock_sm", 1590},
		   {"clock_mem", 5001},
		   {"throttle", 0},
		   {"pcie_tx_kbps", 0},
		   {"pcie_rx_kbps", 0},
		   {"fan", 35}}}},
	};
	return {{"proc_sample_ms", 50}, {"devices", {gpu0, gpu1}}};
}

// Each metric from the scenario value it reports and the factor to its unit.
const std::map<std::string, std::pair<std::string, double>> kFromScenario = {
	{"util_gpu_pct", {"util_gpu", 1}},
	{"util_mem_pct", {"util_mem", 1}},
	{"mem_used_bytes", {"mem_used", 1}},
	{"mem_total_bytes", {"mem_total", 1}},
	{"temp_c", {"temp", 1}},
	{"power_w", {"power_mw", 1e-3}},
	{"power_limit_w", {"power_limit_mw", 1e-3}},
	{"clock_sm_mhz", {"clock_sm", 1}},
	{"clock_mem_mhz", {"clock_mem", 1}},
	{"throttle_reasons_mask", {"throttle", 1}},
	{"pcie_tx_bytes_per_s", {"pcie_tx_kbps", 1024}},
	{"pcie_rx_bytes_per_s", {"pcie_rx_kbps", 1024}},
	{"ecc_volatile_corrected", {"ecc_corrected", 1}},
	{"ecc_volatile_uncorrected", {"ecc_uncorrected", 1}},
	{"fan_pct", {"fan", 1}},
	{"nvlink_tx_bytes_per_s", {"nvlink_tx_kib_per_s", 1024}},
	{"nvlink_rx_bytes_per_s", {"nvlink_rx_kib_per_s", 1024}},
	{"proc_mem_used_bytes", {"mem_used", 1}},
	{"proc_util_sm_pct", {"sm_util", 1}},
	{"proc_util_mem_pct", {"mem_util", 1}},
};

// A scripted value at t: the last step at or before t that names it.
double scripted(const json &timeline, const std::string &name, int64_t t_ms)
{
	double v = 0;
	for (auto &s : timeline)
		if (s["at_ms"].get<int64_t>() <= t_ms && s.contains(name))
			v = s[name].get<double>();
	return v;
}

bool near_step(int64_t t_ms) { return std::abs(t_ms - kStepMs) < kGuardMs; }

class GpuLayer : public ::testing::Test {
protected:
	void SetUp() override
	{
		char tmpl[] = "/tmp/eacgm_gpu_XXXXXX";
		ASSERT_NE(mkdtemp(tmpl), nullptr);
		dir = tmpl;
	}
	void TearDown() override { fs::remove_all(dir); }

	void use_scenario(json sc)
	{
		sc["origin_file"] = dir + "/origin";
		std::ofstream(dir + "/scenario.json") << sc.dump();
		setenv("EACGM_NVML_SCENARIO", (dir + "/scenario.json").c_str(), 1);
	}

	// Records for `ms` after the stand-in's origin, collecting every 50 ms
	// as the record loop does, then stops and collects once more.
	void record(const std::set<uint32_t> &traced, int64_t ms = 1000)
	{
		use_scenario(scenario());
		auto c = open_gpu_collector({.hz = 10, .library = NVML_STANDIN});
		ASSERT_TRUE(c) << c.error().message;
		std::ifstream(dir + "/origin") >> origin;
		ASSERT_GT(origin, 0u);
		while (now() < origin + ms * 1000000) {
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
			(*c)->collect(now(), traced, metrics, events);
			for (auto &w : (*c)->take_warnings())
				warnings.push_back(w);
		}
		(*c)->stop();
		(*c)->collect(now(), traced, metrics, events);
		for (auto &w : (*c)->take_warnings())
			warnings.push_back(w);
		EXPECT_TRUE((*c)->take_warnings().empty()); // each once
		// The stand-in is still loaded while the collector holds it.
		void *h = dlopen(NVML_STANDIN, RTLD_NOW | RTLD_NOLOAD);
		ASSERT_NE(h, nullptr);
		auto calls = reinterpret_cast<unsigned (*)(const char *, unsigned)>(dlsym(h, "eacgm_standin_calls"));
		ASSERT_NE(calls, nullptr);
		fan_calls_gpu0 = calls("nvmlDeviceGetFanSpeed", 0);
		nvlink_calls_gpu1 = calls("nvmlDeviceGetFieldValues", 1);
		dlclose(h);
	}

	static uint64_t now()
	{
		timespec t{};
		clock_gettime(CLOCK_MONOTONIC, &t);
		return uint64_t(t.tv_sec) * 1000000000ull + uint64_t(t.tv_nsec);
	}
	int64_t rel_ms(uint64_t ts) const { return (int64_t(ts) - int64_t(origin)) / 1000000; }
	double rel_ms_exact(uint64_t ts) const { return (double(ts) - double(origin)) / 1e6; }

	std::vector<Metric> of(const std::string &key, const std::string &name, uint32_t pid = 0) const
	{
		std::vector<Metric> out;
		for (auto &m : metrics)
			if (m.key == key && m.name == name && m.pid == pid)
				out.push_back(m);
		return out;
	}
	std::vector<Event> named(const std::string &name) const
	{
		std::vector<Event> out;
		for (auto &e : events)
			if (e.name == name)
				out.push_back(e);
		return out;
	}

	std::string dir;
	uint64_t origin = 0;
	std::vector<Metric> metrics;
	std::vector<Event> events;
	std::vector<std::string> warnings;
	unsigned fan_calls_gpu0 = 0, nvlink_calls_gpu1 = 0;
};

TEST_F(GpuLayer, DeviceValuesAreTheScriptedOnesAtTheirTimes)
{
	record({uint32_t(getpid())});
	json sc = scenario();
	for (int dev = 0; dev < 2; dev++) {
		std::string key = "gpu" + std::to_string(dev);
		const json &timeline = sc["devices"][dev]["timeline"];
		for (auto &[name, from] : kFromScenario) {
			if (name.starts_with("proc_") || name.starts_with("nvlink_"))
				continue;
			auto samples = of(key, name);
			bool absent = (dev == 0 && name == "fan_pct") || (dev == 1 && name.starts_with("ecc_"));
			if (absent) {
				EXPECT_TRUE(samples.empty())
					<< key << " " << name << ": not supported, so no samples at all";
				continue;
			}
			// 10 Hz for 1 s; gpu1 only until it is lost at 700 ms.
			EXPECT_GE(samples.size(), dev == 0 ? 9u : 6u) << key << " " << name;
			for (auto &m : samples) {
				int64_t t = rel_ms(m.ts_ns);
				EXPECT_GE(t, 0) << name;
				if (near_step(t))
					continue;
				EXPECT_EQ(m.value, scripted(timeline, from.first, t) * from.second)
					<< key << " " << name << " at " << t << " ms";
			}
		}
	}
	// The units, spelled out once.
	auto power = of("gpu0", "power_w");
	ASSERT_FALSE(power.empty());
	EXPECT_EQ(power.front().value, 95.5);
	EXPECT_EQ(power.back().value, 310.25);
	EXPECT_EQ(of("gpu0", "pcie_tx_bytes_per_s").back().value, 256000000.0);
	EXPECT_EQ(of("gpu1", "fan_pct").front().value, 35);
	// Not supported is asked once, not every tick.
	EXPECT_EQ(fan_calls_gpu0, 1u);
	EXPECT_EQ(nvlink_calls_gpu1, 1u);
	// Every sample of a device at one time: the time taken before its reads.
	auto util = of("gpu0", "util_gpu_pct"), temp = of("gpu0", "temp_c");
	ASSERT_EQ(util.size(), temp.size());
	for (size_t i = 0; i < util.size(); i++)
		EXPECT_EQ(util[i].ts_ns, temp[i].ts_ns);
	// In time order, 100 ms apart.
	for (size_t i = 1; i < util.size(); i++)
		EXPECT_NEAR(rel_ms_exact(util[i].ts_ns) - rel_ms_exact(util[i - 1].ts_ns), 100, 20);
	for (size_t i = 1; i < metrics.size(); i++)
		EXPECT_LE(metrics[i - 1].ts_ns, metrics[i].ts_ns);
	for (auto &m : metrics)
		EXPECT_EQ(m.layer, "gpu");
}

TEST_F(GpuLayer, NvlinkRateBetweenTwoReadingsOfOneStep)
{
	record({});
	json timeline = scenario()["devices"][0]["timeline"];
	auto util = of("gpu0", "util_gpu_pct"); // the device's sample times
	for (std::string dir : {"tx", "rx"}) {
		auto rate = of("gpu0", "nvlink_" + dir + "_bytes_per_s");
		// None from the first reading: a rate needs two.
		ASSERT_EQ(rate.size() + 1, util.size()) << dir;
		EXPECT_EQ(rate.front().ts_ns, util[1].ts_ns);
		int checked = 0;
		for (size_t i = 0; i < rate.size(); i++) {
			int64_t from = rel_ms(util[i].ts_ns), to = rel_ms(rate[i].ts_ns);
			if (near_step(from) || near_step(to) || (from < kStepMs) != (to < kStepMs))
				continue; // the two readings straddle the step
			double want = scripted(timeline, "nvlink_" + dir + "_kib_per_s", to) * 1024;
			EXPECT_DOUBLE_EQ(rate[i].value, want) << dir << " at " << to << " ms";
			checked++;
		}
		EXPECT_GE(checked, 7) << dir;
	}
	EXPECT_TRUE(of("gpu1", "nvlink_tx_bytes_per_s").empty()); // not supported there
}

TEST_F(GpuLayer, ThrottleReasonsAsEventsWhenTheSetChanges)
{
	record({});
	auto t = named("clock_throttle");
	ASSERT_EQ(t.size(), 2u); // gpu0 at its first sample and after the step; gpu1 never throttles
	EXPECT_EQ(t[0].key, "gpu0");
	EXPECT_EQ(t[0].args, json({{"reasons", {"gpu_idle"}}}));
	EXPECT_EQ(t[0].ts_ns, of("gpu0", "util_gpu_pct").front().ts_ns);
	EXPECT_EQ(t[1].args, json({{"reasons", {"sw_power_cap", "sw_thermal_slowdown"}}}));
	EXPECT_GE(rel_ms(t[1].ts_ns), kStepMs);
	EXPECT_LT(rel_ms(t[1].ts_ns), kStepMs + 100 + kGuardMs);
}

TEST_F(GpuLayer, XidAndDoubleBitEccOnceAtTheirTimes)
{
	record({});
	auto xid = named("xid");
	ASSERT_EQ(xid.size(), 1u);
	EXPECT_EQ(xid[0].key, "gpu0");
	EXPECT_EQ(xid[0].layer, "gpu");
	EXPECT_EQ(xid[0].args, json({{"xid", 13}}));
	EXPECT_GE(rel_ms(xid[0].ts_ns), 300);
	EXPECT_LT(rel_ms(xid[0].ts_ns), 300 + kGuardMs);
	auto ecc = named("ecc_double_bit");
	ASSERT_EQ(ecc.size(), 1u);
	EXPECT_EQ(ecc[0].key, "gpu0");
	EXPECT_GE(rel_ms(ecc[0].ts_ns), 600);
	EXPECT_LT(rel_ms(ecc[0].ts_ns), 600 + kGuardMs);
	// The devices, named once each.
	auto dev = named("device");
	ASSERT_EQ(dev.size(), 2u);
	EXPECT_EQ(
		dev[0].args,
		json({{"index", 0}, {"name", "Stand-in A100"}, {"uuid", "GPU-11111111-2222-3333-4444-555555555555"}}));
	EXPECT_EQ(dev[1].key, "gpu1");
	EXPECT_EQ(dev[1].args["name"], "Stand-in T4");
}

TEST_F(GpuLayer, LostDeviceOnceAndTheOtherGoesOn)
{
	record({});
	auto lost = named("device_lost");
	ASSERT_EQ(lost.size(), 1u);
	EXPECT_EQ(lost[0].key, "gpu1");
	int64_t at = rel_ms(lost[0].ts_ns);
	EXPECT_GE(at, kLostMs - 1); // the first sample on or after 700 ms
	EXPECT_LT(at, kLostMs + 100 + kGuardMs);
	for (auto &m : metrics) {
		if (m.key == "gpu1") {
			EXPECT_LT(m.ts_ns, lost[0].ts_ns) << m.name;
		}
	}
	EXPECT_GE(of("gpu1", "util_gpu_pct").size(), 6u);
	size_t after = 0;
	for (auto &m : of("gpu0", "util_gpu_pct"))
		after += m.ts_ns > lost[0].ts_ns;
	EXPECT_GE(after, 2u);
	ASSERT_EQ(warnings.size(), 1u);
	EXPECT_NE(warnings[0].find("gpu1 (Stand-in T4) was lost (GPU is lost)"), std::string::npos) << warnings[0];
}

TEST_F(GpuLayer, ProcessValuesForTracedProcessesOnly)
{
	uint32_t self = uint32_t(getpid());
	record({self});
	json procs = scenario()["devices"][0]["processes"];
	auto mem = of("gpu0", "proc_mem_used_bytes", self);
	EXPECT_GE(mem.size(), 9u);
	for (auto &m : mem) {
		if (!near_step(rel_ms(m.ts_ns))) {
			EXPECT_EQ(m.value, scripted(procs[0]["timeline"], "mem_used", rel_ms(m.ts_ns)));
		}
	}
	EXPECT_EQ(mem.front().value, double(512 * MiB));
	EXPECT_EQ(mem.back().value, double(2 * GiB));
	// Utilisation samples carry NVML's own times (its samples are every 50 ms
	// from the origin, in CLOCK_REALTIME µs), moved to CLOCK_MONOTONIC. Each
	// is the mean of NVML's samples since the one read before (lastSeenTimeStamp):
	// asked for all of them, the values after the step would be blends.
	for (std::string name : {"proc_util_sm_pct", "proc_util_mem_pct"}) {
		auto util = of("gpu0", name, self);
		EXPECT_GE(util.size(), 8u) << name;
		int64_t last = -1; // the newest NVML sample read so far
		for (auto &m : util) {
			double t = rel_ms_exact(m.ts_ns);
			int64_t grid = std::llround(t / 50) * 50;
			EXPECT_NEAR(t, double(grid), 1.0) << name;
			EXPECT_GT(grid, last) << name << ": a sample read twice";
			double sum = 0;
			int n = 0;
			for (int64_t g = last + 1; g <= grid; g++)
				if (g % 50 == 0) {
					sum += scripted(procs[0]["timeline"],
							name == "proc_util_sm_pct" ? "sm_util" : "mem_util", g);
					n++;
				}
			EXPECT_EQ(m.value, double(unsigned(sum / n))) << name << " at " << grid << " ms";
			last = grid;
		}
		EXPECT_EQ(util.back().value, name == "proc_util_sm_pct" ? 85 : 40);
	}
	// pid 1 is on the GPU too, but not traced.
	for (auto &m : metrics)
		EXPECT_TRUE(m.pid == 0 || m.pid == self) << m.name << " pid " << m.pid;
}

TEST_F(GpuLayer, ProcessValuesOfAnotherTracedSet)
{
	record({1}, 400);
	auto mem = of("gpu0", "proc_mem_used_bytes", 1);
	ASSERT_GE(mem.size(), 3u);
	for (auto &m : mem)
		EXPECT_EQ(m.value, double(256 * MiB));
	EXPECT_FALSE(of("gpu0", "proc_util_sm_pct", 1).empty());
	for (auto &m : metrics)
		EXPECT_TRUE(m.pid == 0 || m.pid == 1) << m.name << " pid " << m.pid;
}

TEST(GpuOpen, MissingLibrary)
{
	auto r = open_gpu_collector({.library = "/nonexistent/libnvidia-ml.so.1"});
	ASSERT_FALSE(r);
	EXPECT_EQ(r.error().message,
		  "gpu layer unavailable: /nonexistent/libnvidia-ml.so.1 not found (no NVIDIA driver)");
	EXPECT_EQ(r.error().kind, ErrorKind::NotFound);
	// The default, where no NVIDIA driver (nor the stand-in) is loadable.
	if (void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW)) {
		dlclose(h);
		GTEST_SKIP() << "this machine has libnvidia-ml.so.1";
	}
	r = open_gpu_collector({});
	ASSERT_FALSE(r);
	EXPECT_EQ(r.error().message, "gpu layer unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver)");
	EXPECT_EQ(r.error().kind, ErrorKind::NotFound);
}

TEST(GpuOpen, NotALibrary)
{
	auto r = open_gpu_collector({.library = SOURCE_DIR "/README.md"});
	ASSERT_FALSE(r);
	EXPECT_TRUE(r.error().message.starts_with("gpu layer unavailable: cannot load " SOURCE_DIR "/README.md: "))
		<< r.error().message;
	EXPECT_EQ(r.error().kind, ErrorKind::BadInput); // there, but no library
}

TEST_F(GpuLayer, InitFailure)
{
	use_scenario({{"init_error", 9}, {"devices", json::array()}}); // NVML_ERROR_DRIVER_NOT_LOADED
	auto r = open_gpu_collector({.library = NVML_STANDIN});
	ASSERT_FALSE(r);
	EXPECT_EQ(r.error().message,
		  "gpu layer unavailable: nvmlInit_v2 failed: Driver Not Loaded; check the driver with nvidia-smi");
	EXPECT_EQ(r.error().kind, ErrorKind::NotFound); // NVML's own code says which
}

TEST_F(GpuLayer, NoDevices)
{
	use_scenario({{"devices", json::array()}});
	auto r = open_gpu_collector({.library = NVML_STANDIN});
	ASSERT_FALSE(r);
	EXPECT_EQ(r.error().message, "gpu layer unavailable: NVML finds no GPU; check with nvidia-smi");
	EXPECT_EQ(r.error().kind, ErrorKind::NotFound);
}

TEST(GpuOpen, SamplingRateOutOfRange)
{
	auto r = open_gpu_collector({.hz = 0, .library = NVML_STANDIN});
	ASSERT_FALSE(r);
	EXPECT_EQ(r.error().message,
		  "gpu layer: a sampling rate of 0 Hz is out of range; give --gpu-hz between 0.1 and 1000");
	EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
}

} // namespace
