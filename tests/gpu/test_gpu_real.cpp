// SPDX-License-Identifier: Apache-2.0
// The gpu layer against the real NVML, for machines with an NVIDIA GPU and
// driver (ctest label "gpu"; where libnvidia-ml.so.1 cannot be loaded every
// test skips itself). Nothing here is scripted: the values must be physically
// sensible and consistent with each other.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "layers/gpu.h"

using namespace eacgm;

namespace {

struct Recorded {
	std::vector<Metric> metrics;
	std::vector<Event> events;
	std::vector<std::string> warnings;
};

// Opens the collector on the real library, or skips the test.
#define OPEN_OR_SKIP(c)                                                                                                \
	auto c = open_gpu_collector({});                                                                               \
	if (!c && c.error().message.find("not found (no NVIDIA driver)") != std::string::npos)                         \
		GTEST_SKIP() << c.error().message;                                                                     \
	ASSERT_TRUE(c) << c.error().message

Recorded run(Collector &c, std::set<uint32_t> traced, int ms)
{
	Recorded r;
	auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
	while (std::chrono::steady_clock::now() < until) {
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		c.collect(0, traced, r.metrics, r.events);
	}
	c.stop();
	c.collect(0, traced, r.metrics, r.events);
	r.warnings = c.take_warnings();
	return r;
}

TEST(GpuReal, DeviceValuesInPhysicalRanges)
{
	OPEN_OR_SKIP(c);
	Recorded r = run(**c, {}, 1500);
	EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
	std::map<std::string, std::map<std::string, std::vector<double>>> by; // key -> name -> values
	for (auto &m : r.metrics) {
		EXPECT_EQ(m.layer, "gpu");
		EXPECT_TRUE(std::isfinite(m.value)) << m.name;
		if (!m.pid)
			by[m.key][m.name].push_back(m.value);
	}
	size_t devices = 0;
	for (auto &e : r.events)
		if (e.name == "device") {
			devices++;
			EXPECT_FALSE(e.args["name"].get<std::string>().empty());
			EXPECT_TRUE(e.args["uuid"].get<std::string>().starts_with("GPU-")) << e.args.dump();
			EXPECT_TRUE(by.count(e.key)) << e.key << " has no samples";
		}
	ASSERT_GE(devices, 1u);
	auto in = [](const std::vector<double> &v, double lo, double hi) {
		for (double x : v)
			if (x < lo || x > hi)
				return false;
		return true;
	};
	for (auto &[key, names] : by) {
		// 10 Hz for 1.5 s, every device has utilisation and memory.
		ASSERT_GE(names["util_gpu_pct"].size(), 12u) << key;
		EXPECT_TRUE(in(names["util_gpu_pct"], 0, 100)) << key;
		EXPECT_TRUE(in(names["util_mem_pct"], 0, 100)) << key;
		auto &used = names["mem_used_bytes"], &total = names["mem_total_bytes"];
		ASSERT_EQ(used.size(), total.size());
		for (size_t i = 0; i < used.size(); i++) {
			EXPECT_GT(total[i], 0) << key;
			EXPECT_LE(used[i], total[i]) << key;
		}
		EXPECT_TRUE(in(names["temp_c"], 1, 120)) << key;
		EXPECT_TRUE(in(names["power_w"], 0, 2000)) << key;
		EXPECT_TRUE(in(names["power_limit_w"], 1, 2000)) << key;
		EXPECT_TRUE(in(names["clock_sm_mhz"], 1, 5000)) << key;
		EXPECT_TRUE(in(names["clock_mem_mhz"], 1, 20000)) << key;
		EXPECT_TRUE(in(names["fan_pct"], 0, 200)) << key; // may exceed 100 (nvml.h)
		EXPECT_TRUE(in(names["pcie_tx_bytes_per_s"], 0, 1e12)) << key;
		EXPECT_TRUE(in(names["ecc_volatile_uncorrected"], 0, 1e12)) << key;
		for (double m : names["throttle_reasons_mask"])
			EXPECT_EQ(m, std::floor(m));
	}
}

// This process allocates 64 MiB with cudaMalloc: NVML lists it with at least that.
TEST(GpuReal, ProcessMemoryOfAnAllocatingProcess)
{
	void *cudart = dlopen(CUDART, RTLD_NOW);
	if (!cudart)
		GTEST_SKIP() << "no libcudart: " << dlerror();
	auto cuda_malloc = reinterpret_cast<int (*)(void **, size_t)>(dlsym(cudart, "cudaMalloc"));
	auto cuda_free = reinterpret_cast<int (*)(void *)>(dlsym(cudart, "cudaFree"));
	ASSERT_TRUE(cuda_malloc && cuda_free);
	void *p = nullptr;
	int rc = cuda_malloc(&p, 64 << 20);
	if (rc != 0)
		GTEST_SKIP() << "cudaMalloc failed with " << rc << " (no usable GPU)";
	OPEN_OR_SKIP(c);
	uint32_t self = uint32_t(getpid());
	Recorded r = run(**c, {self}, 1000);
	cuda_free(p);
	double most = 0;
	for (auto &m : r.metrics)
		if (m.name == "proc_mem_used_bytes") {
			EXPECT_EQ(m.pid, self); // only the traced process
			most = std::max(most, m.value);
		}
	EXPECT_GE(most, double(64 << 20));
}

} // namespace
