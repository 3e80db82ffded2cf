// SPDX-License-Identifier: Apache-2.0
// The host layer's procfs side against recorded files under a fake root:
// PSI and /proc/net/dev parsing, deltas between samples, counter resets,
// missing files, and the connection key format.
#include <arpa/inet.h>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <unistd.h>

#include "layers/host.h"

namespace eacgm::test {
namespace {

namespace fs = std::filesystem;

const char *kNetDevHeader =
	"Inter-|   Receive                                                |  Transmit\n"
	" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
	"carrier compressed\n";

std::string net_dev_line(const std::string &name, uint64_t base)
{
	// rx: bytes packets errs drop fifo frame compressed multicast; tx: the
	// same eight, each field a distinct value so a wrong column shows.
	std::string s = "  " + name + ":";
	for (int i = 0; i < 16; i++)
		s += " " + std::to_string(base + i);
	return s + "\n";
}

class HostSamplerFiles : public ::testing::Test {
protected:
	void SetUp() override
	{
		root = fs::temp_directory_path() /
			("eacgm-host-" + std::to_string(getpid()) + "-" +
			 ::testing::UnitTest::GetInstance()->current_test_info()->name());
		fs::create_directories(root / "proc/pressure");
		fs::create_directories(root / "proc/net");
	}
	void TearDown() override { fs::remove_all(root); }
	void write(const std::string &rel, const std::string &text) { std::ofstream(root / rel) << text; }
	void psi(const std::string &res, double some10, uint64_t some_total, double full10, uint64_t full_total)
	{
		char buf[256];
		snprintf(buf, sizeof(buf),
			 "some avg10=%.2f avg60=0.50 avg300=0.25 total=%llu\nfull avg10=%.2f avg60=0.00 avg300=0.00 "
			 "total=%llu\n",
			 some10, (unsigned long long)some_total, full10, (unsigned long long)full_total);
		write("proc/pressure/" + res, buf);
	}
	// name[/key] -> value, for one sample's metrics.
	static std::map<std::string, double> by_name(const std::vector<Metric> &m)
	{
		std::map<std::string, double> out;
		for (auto &x : m) {
			EXPECT_EQ(x.layer, "host");
			EXPECT_EQ(x.pid, 0u);
			EXPECT_EQ(x.ts_ns, 42u);
			out[x.key.empty() ? x.name : x.name + "/" + x.key] = x.value;
		}
		return out;
	}
	fs::path root;
};

TEST(HostParse, Psi)
{
	auto p = parse_psi("some avg10=1.25 avg60=0.27 avg300=0.39 total=519953939\n"
			   "full avg10=0.50 avg60=0.00 avg300=0.00 total=77\n");
	ASSERT_TRUE(p);
	ASSERT_TRUE(p->some && p->full);
	EXPECT_DOUBLE_EQ(p->some->avg10_pct, 1.25);
	EXPECT_EQ(p->some->total_us, 519953939u);
	EXPECT_DOUBLE_EQ(p->full->avg10_pct, 0.5);
	EXPECT_EQ(p->full->total_us, 77u);
	// cpu before Linux 5.13: no full line.
	auto old = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n");
	ASSERT_TRUE(old);
	EXPECT_FALSE(old->full);
	EXPECT_FALSE(parse_psi(""));
	EXPECT_FALSE(parse_psi("some avg10=x total=1\n"));
	EXPECT_FALSE(parse_psi("some avg60=0.1\n"));
}

TEST(HostParse, NetDev)
{
	auto d = parse_net_dev(std::string(kNetDevHeader) + net_dev_line("lo", 100) + net_dev_line("veth-a1", 1000) +
			       "  bad: 1 2 3\n");
	ASSERT_EQ(d.size(), 2u);
	const NicCounters &v = d.at("veth-a1");
	EXPECT_EQ(v.rx_bytes, 1000u);
	EXPECT_EQ(v.rx_packets, 1001u);
	EXPECT_EQ(v.rx_errors, 1002u);
	EXPECT_EQ(v.rx_dropped, 1003u);
	EXPECT_EQ(v.tx_bytes, 1008u);
	EXPECT_EQ(v.tx_packets, 1009u);
	EXPECT_EQ(v.tx_errors, 1010u);
	EXPECT_EQ(v.tx_dropped, 1011u);
	EXPECT_EQ(d.at("lo").rx_bytes, 100u);
}

TEST(HostParse, ConnectionKeys)
{
	eacgm_host_conn_key k{};
	k.family = AF_INET;
	k.sport = 5201;
	k.dport = 40312;
	inet_pton(AF_INET, "10.0.0.1", k.saddr);
	inet_pton(AF_INET, "10.0.0.2", k.daddr);
	EXPECT_EQ(format_conn_key(k), "10.0.0.1:5201->10.0.0.2:40312");
	k.family = AF_INET6;
	inet_pton(AF_INET6, "::1", k.saddr);
	inet_pton(AF_INET6, "fe80::2", k.daddr);
	EXPECT_EQ(format_conn_key(k), "[::1]:5201->[fe80::2]:40312");
}

TEST_F(HostSamplerFiles, FirstSampleIsABaselineThenDeltas)
{
	psi("cpu", 1.5, 1000, 0, 0);
	psi("memory", 0, 500, 0, 200);
	psi("io", 3.25, 7000, 2.5, 6000);
	write("proc/net/dev", std::string(kNetDevHeader) + net_dev_line("eth0", 1000));
	HostSystemSampler s(root.string() + "/"); // a trailing slash is fine
	std::vector<Metric> first;
	s.sample(42, first);
	auto m = by_name(first);
	// Averages at once; no deltas without a previous sample.
	EXPECT_EQ(m.size(), 6u);
	EXPECT_DOUBLE_EQ(m["psi_cpu_some_avg10_pct"], 1.5);
	EXPECT_DOUBLE_EQ(m["psi_io_full_avg10_pct"], 2.5);

	psi("cpu", 2.0, 1600, 0, 0);
	psi("memory", 0, 500, 0.1, 230);
	psi("io", 3.0, 7010, 2.0, 6009);
	write("proc/net/dev", std::string(kNetDevHeader) + net_dev_line("eth0", 1100) + net_dev_line("veth9", 5));
	std::vector<Metric> second;
	s.sample(42, second);
	m = by_name(second);
	EXPECT_DOUBLE_EQ(m["psi_cpu_some_avg10_pct"], 2.0);
	EXPECT_DOUBLE_EQ(m["psi_cpu_some_stall_us"], 600);
	EXPECT_DOUBLE_EQ(m["psi_cpu_full_stall_us"], 0);
	EXPECT_DOUBLE_EQ(m["psi_memory_some_stall_us"], 0);
	EXPECT_DOUBLE_EQ(m["psi_memory_full_stall_us"], 30);
	EXPECT_DOUBLE_EQ(m["psi_memory_full_avg10_pct"], 0.1);
	EXPECT_DOUBLE_EQ(m["psi_io_some_stall_us"], 10);
	EXPECT_DOUBLE_EQ(m["psi_io_full_stall_us"], 9);
	for (const char *n : {"nic_rx_bytes", "nic_rx_packets", "nic_rx_errors", "nic_rx_dropped", "nic_tx_bytes",
			      "nic_tx_packets", "nic_tx_errors", "nic_tx_dropped"})
		EXPECT_DOUBLE_EQ(m[std::string(n) + "/eth0"], 100) << n;
	// A new interface starts with a baseline.
	EXPECT_FALSE(m.count("nic_rx_bytes/veth9"));
	EXPECT_EQ(m.size(), 12u + 8u);
	EXPECT_TRUE(s.take_warnings().empty());
}

TEST_F(HostSamplerFiles, ACounterGoingBackIsANewBaseline)
{
	write("proc/net/dev", std::string(kNetDevHeader) + net_dev_line("eth0", 5000));
	HostSystemSampler s(root.string());
	std::vector<Metric> m;
	s.sample(42, m);
	write("proc/net/dev", std::string(kNetDevHeader) + net_dev_line("eth0", 10)); // re-created
	m.clear();
	s.sample(42, m);
	EXPECT_FALSE(by_name(m).count("nic_rx_bytes/eth0"));
	write("proc/net/dev", std::string(kNetDevHeader) + net_dev_line("eth0", 17));
	m.clear();
	s.sample(42, m);
	EXPECT_DOUBLE_EQ(by_name(m)["nic_tx_dropped/eth0"], 7);
}

TEST_F(HostSamplerFiles, MissingFilesWarnOnce)
{
	fs::remove_all(root / "proc");
	HostSystemSampler s(root.string());
	std::vector<Metric> m;
	s.sample(42, m);
	s.sample(42, m);
	EXPECT_TRUE(m.empty());
	auto w = s.take_warnings();
	ASSERT_EQ(w.size(), 2u);
	EXPECT_NE(w[0].find("/proc/pressure/cpu"), std::string::npos) << w[0];
	EXPECT_NE(w[0].find("CONFIG_PSI"), std::string::npos) << w[0];
	EXPECT_NE(w[1].find("/proc/net/dev"), std::string::npos) << w[1];
	EXPECT_TRUE(s.take_warnings().empty());
}

TEST(HostOptionsCheck, ZeroIntervalIsRefused)
{
	HostOptions o;
	o.interval_ms = 0;
	auto c = open_host_collector(-1, o);
	ASSERT_FALSE(c.ok());
	EXPECT_NE(c.error().message.find("--host-interval-ms"), std::string::npos);
}

} // namespace
} // namespace eacgm::test
