// SPDX-License-Identifier: Apache-2.0
// A stand-in for NVML (libnvidia-ml.so.1) on machines without an NVIDIA
// driver: the functions eacgm's gpu layer calls, with nvml.h's ABI, answering
// from a scripted scenario so tests can assert exact values at known times.
//
// The scenario is a JSON file named by EACGM_NVML_SCENARIO, read by the
// first nvmlInit_v2 (again after a full nvmlShutdown). Times are ms after
// that nvmlInit_v2, the origin.
// {
//   "origin_file": "/tmp/o",   optional: the origin (CLOCK_MONOTONIC ns) is written here
//   "init_error": 9,           optional: nvmlInit_v2 returns this nvmlReturn_t
//   "proc_sample_ms": 50,      the "driver" takes a per-process utilisation sample
//                              every this many ms from the origin (default 50); a
//                              query averages those since its lastSeenTimeStamp
//   "devices": [{
//     "name": "...", "uuid": "...",
//     "not_supported": ["nvmlDeviceGetFanSpeed"],   these answer NVML_ERROR_NOT_SUPPORTED
//     "lost_at_ms": 700,         from then on every call on it answers NVML_ERROR_GPU_IS_LOST
//     "timeline": [{"at_ms": 0, "util_gpu": 10, ...}, {"at_ms": 400, "util_gpu": 90}],
//        piecewise constant; a step changes the values it names, a value never named
//        reads 0. Values in NVML's units: util_gpu util_mem (%), mem_used mem_total
//        (bytes), temp (C), power_mw power_limit_mw, clock_sm clock_mem (MHz), throttle
//        (reasons bitmask), pcie_tx_kbps pcie_rx_kbps, ecc_corrected ecc_uncorrected,
//        fan (%), nvlink_tx_kib_per_s nvlink_rx_kib_per_s (integrated into the
//        cumulative KiB counters that nvmlDeviceGetFieldValues returns).
//     "processes": [{"pid": 1234 | "self" | "children", "until_ms": 900,
//                    "timeline": [{"at_ms": 0, "mem_used": 1048576, "sm_util": 40, "mem_util": 10}]}],
//        a process is listed from its first step until until_ms. "self" is the process
//        that loaded this library; "children" its direct children at the time of the
//        call (how an e2e test names the program that eacgm launches).
//     "events": [{"at_ms": 300, "xid": 79}, {"at_ms": 500, "ecc_double_bit": true}]
//   }]
// }
// eacgm_standin_calls(function, device) tells tests how often a function was
// called on a device (a "not supported" answer must not be asked for again).
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

using json = nlohmann::json;

extern "C" {
// nvml.h's ABI: the types and values the stand-in answers with.
typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_UNKNOWN = 999,
};
typedef struct Device *nvmlDevice_t;
typedef struct EventSet *nvmlEventSet_t;
typedef struct {
	unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
	unsigned int pid;
	unsigned long long timeStamp;
	unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
typedef struct {
	nvmlDevice_t device;
	unsigned long long eventType, eventData;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef union {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	long long sllVal;
	unsigned short usVal;
} nvmlValue_t;
typedef struct {
	unsigned int fieldId, scopeId;
	long long timestamp, latencyUsec;
	int valueType;
	nvmlReturn_t nvmlReturn;
	nvmlValue_t value;
} nvmlFieldValue_t;
}

namespace {

constexpr unsigned long long kDoubleBitEcc = 0x2, kXid = 0x8;
constexpr unsigned kNvlinkTx = 138, kNvlinkRx = 139;
constexpr int kValueTypeULongLong = 3;

struct Step {
	int64_t at_ms;
	json values;
};

// The value of `name` at t: the last step at or before t that names it.
double value_at(const std::vector<Step> &steps, const char *name, int64_t t_ms)
{
	double v = 0;
	for (auto &s : steps)
		if (s.at_ms <= t_ms && s.values.contains(name))
			v = s.values[name].get<double>();
	return v;
}

struct Process {
	json pid; // number, "self" or "children"
	int64_t until_ms = INT64_MAX;
	std::vector<Step> steps;
};

struct Event {
	int64_t at_ms;
	unsigned long long type, data;
};

} // namespace

struct Device {
	unsigned index = 0;
	std::string name, uuid;
	std::set<std::string> not_supported;
	int64_t lost_at_ms = INT64_MAX;
	std::vector<Step> timeline;
	std::vector<Process> processes;
	std::vector<Event> events;
};

struct EventSet {
	std::map<unsigned, unsigned long long> registered; // device -> event types
	std::set<std::pair<unsigned, size_t>> delivered;   // (device, event)
};

namespace {

std::mutex g_mu;
int g_inits = 0;
std::vector<Device> g_devices;
uint64_t g_origin_ns = 0, g_origin_real_ns = 0;
int64_t g_proc_sample_ms = 50;
std::map<std::pair<std::string, unsigned>, unsigned> g_calls;

uint64_t clock_ns(clockid_t c)
{
	timespec t{};
	clock_gettime(c, &t);
	return uint64_t(t.tv_sec) * 1000000000ull + uint64_t(t.tv_nsec);
}
int64_t now_ms() { return int64_t(clock_ns(CLOCK_MONOTONIC) - g_origin_ns) / 1000000; }

std::vector<Step> steps_of(const json &j)
{
	std::vector<Step> out;
	for (auto &s : j)
		out.push_back({s.at("at_ms").get<int64_t>(), s});
	return out;
}

nvmlReturn_t load_scenario()
{
	const char *path = getenv("EACGM_NVML_SCENARIO");
	if (!path) {
		fprintf(stderr, "nvml stand-in: EACGM_NVML_SCENARIO is not set\n");
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	try {
		std::ifstream f(path);
		json sc = json::parse(f);
		if (sc.contains("init_error"))
			return sc["init_error"].get<int>();
		g_devices.clear();
		g_proc_sample_ms = sc.value("proc_sample_ms", 50);
		for (auto &d : sc.at("devices")) {
			Device dev;
			dev.index = unsigned(g_devices.size());
			dev.name = d.at("name");
			dev.uuid = d.at("uuid");
			for (auto &n : d.value("not_supported", json::array()))
				dev.not_supported.insert(n.get<std::string>());
			dev.lost_at_ms = d.value("lost_at_ms", INT64_MAX);
			dev.timeline = steps_of(d.value("timeline", json::array()));
			for (auto &p : d.value("processes", json::array()))
				dev.processes.push_back(
					{p.at("pid"), p.value("until_ms", INT64_MAX), steps_of(p.at("timeline"))});
			for (auto &e : d.value("events", json::array()))
				dev.events.push_back({e.at("at_ms").get<int64_t>(),
						      e.contains("xid") ? kXid : kDoubleBitEcc, e.value("xid", 0ull)});
			g_devices.push_back(std::move(dev));
		}
		g_calls.clear();
		g_origin_ns = clock_ns(CLOCK_MONOTONIC);
		g_origin_real_ns = clock_ns(CLOCK_REALTIME);
		if (sc.contains("origin_file")) {
			std::ofstream o(sc["origin_file"].get<std::string>());
			o << g_origin_ns << "\n";
		}
	} catch (const std::exception &e) {
		fprintf(stderr, "nvml stand-in: scenario %s: %s\n", path, e.what());
		return NVML_ERROR_UNKNOWN;
	}
	return NVML_SUCCESS;
}

std::vector<unsigned> children_of_self()
{
	std::vector<unsigned> out;
	if (DIR *d = opendir("/proc/self/task")) {
		while (dirent *e = readdir(d)) {
			if (e->d_name[0] == '.')
				continue;
			std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/children");
			for (unsigned pid; f >> pid;)
				out.push_back(pid);
		}
		closedir(d);
	}
	std::sort(out.begin(), out.end());
	out.erase(std::unique(out.begin(), out.end()), out.end());
	return out;
}

std::vector<unsigned> pids_of(const Process &p)
{
	if (p.pid.is_number())
		return {p.pid.get<unsigned>()};
	if (p.pid == "self")
		return {unsigned(getpid())};
	return children_of_self();
}

bool alive(const Process &p, int64_t t_ms) { return !p.steps.empty() && p.steps[0].at_ms <= t_ms && t_ms < p.until_ms; }

// Every device call starts here: counts it, then answers as the scenario
// says for the device at this time. NVML_SUCCESS: go on and fill in values.
nvmlReturn_t enter(const char *function, nvmlDevice_t dev)
{
	std::lock_guard lock(g_mu);
	if (!g_inits)
		return NVML_ERROR_UNINITIALIZED;
	if (!dev)
		return NVML_ERROR_INVALID_ARGUMENT;
	g_calls[{function, dev->index}]++;
	if (now_ms() >= dev->lost_at_ms)
		return NVML_ERROR_GPU_IS_LOST;
	if (dev->not_supported.count(function))
		return NVML_ERROR_NOT_SUPPORTED;
	return NVML_SUCCESS;
}

unsigned u(const Device *d, const char *name) { return unsigned(value_at(d->timeline, name, now_ms())); }

// The cumulative KiB of a rate scripted per step, at t (integrated exactly
// in microseconds so a test can compute the same number).
unsigned long long integrate(const std::vector<Step> &steps, const char *rate, int64_t t_us)
{
	double kib = 0;
	for (size_t i = 0; i < steps.size(); i++) {
		int64_t from = steps[i].at_ms * 1000, to = i + 1 < steps.size() ? steps[i + 1].at_ms * 1000 : INT64_MAX;
		if (t_us <= from)
			break;
		kib += value_at(steps, rate, steps[i].at_ms) * double(std::min(t_us, to) - from) / 1e6;
	}
	return (unsigned long long)kib;
}

} // namespace

#define API extern "C" __attribute__((visibility("default")))

API unsigned eacgm_standin_calls(const char *function, unsigned device)
{
	std::lock_guard lock(g_mu);
	auto it = g_calls.find({function, device});
	return it == g_calls.end() ? 0 : it->second;
}

API nvmlReturn_t nvmlInit_v2(void)
{
	std::lock_guard lock(g_mu);
	if (g_inits == 0)
		if (nvmlReturn_t rc = load_scenario(); rc != NVML_SUCCESS)
			return rc;
	g_inits++;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlShutdown(void)
{
	std::lock_guard lock(g_mu);
	if (!g_inits)
		return NVML_ERROR_UNINITIALIZED;
	g_inits--;
	return NVML_SUCCESS;
}

API const char *nvmlErrorString(nvmlReturn_t rc)
{
	switch (rc) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	default: return "Unknown Error";
	}
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count)
{
	std::lock_guard lock(g_mu);
	if (!g_inits)
		return NVML_ERROR_UNINITIALIZED;
	*count = unsigned(g_devices.size());
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device)
{
	std::lock_guard lock(g_mu);
	if (!g_inits)
		return NVML_ERROR_UNINITIALIZED;
	if (index >= g_devices.size())
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &g_devices[index];
	return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(const std::string &s, char *out, unsigned length)
{
	if (s.size() + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(out, length, "%s", s.c_str());
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned length)
{
	nvmlReturn_t rc = enter(__func__, d);
	return rc ? rc : copy_string(d->name, name, length);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned length)
{
	nvmlReturn_t rc = enter(__func__, d);
	return rc ? rc : copy_string(d->uuid, uuid, length);
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	*out = {u(d, "util_gpu"), u(d, "util_mem")};
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	int64_t t = now_ms();
	auto total = (unsigned long long)value_at(d->timeline, "mem_total", t);
	auto used = (unsigned long long)value_at(d->timeline, "mem_used", t);
	*out = {total, total - used, used};
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	if (sensor != 0) // NVML_TEMPERATURE_GPU
		return NVML_ERROR_INVALID_ARGUMENT;
	*out = u(d, "temp");
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	*out = u(d, "power_mw");
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	*out = u(d, "power_limit_mw");
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	if (type != 1 && type != 2) // NVML_CLOCK_SM, NVML_CLOCK_MEM: what the scenario has
		return NVML_ERROR_INVALID_ARGUMENT;
	*out = u(d, type == 1 ? "clock_sm" : "clock_mem");
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	*out = (unsigned long long)value_at(d->timeline, "throttle", now_ms());
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	if (counter != 0 && counter != 1)
		return NVML_ERROR_INVALID_ARGUMENT;
	*out = u(d, counter == 0 ? "pcie_tx_kbps" : "pcie_rx_kbps");
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type, unsigned long long *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	if ((error_type != 0 && error_type != 1) || counter_type != 0) // the scenario has volatile counts
		return NVML_ERROR_INVALID_ARGUMENT;
	*out = (unsigned long long)value_at(d->timeline, error_type == 0 ? "ecc_corrected" : "ecc_uncorrected",
					    now_ms());
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned *out)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	*out = u(d, "fan");
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	if (count < 0 || !values)
		return NVML_ERROR_INVALID_ARGUMENT;
	// One time for all values, as a single driver read would give.
	uint64_t mono = clock_ns(CLOCK_MONOTONIC);
	int64_t t_us = int64_t(mono - g_origin_ns) / 1000;
	long long real_us = (long long)(g_origin_real_ns / 1000) + t_us; // the counters' clock, to the µs
	for (int i = 0; i < count; i++) {
		auto &v = values[i];
		v.timestamp = real_us;
		v.latencyUsec = 0;
		if ((v.fieldId != kNvlinkTx && v.fieldId != kNvlinkRx) || v.scopeId != UINT_MAX) {
			v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
			continue;
		}
		v.nvmlReturn = NVML_SUCCESS;
		v.valueType = kValueTypeULongLong;
		v.value.ullVal = integrate(
			d->timeline, v.fieldId == kNvlinkTx ? "nvlink_tx_kib_per_s" : "nvlink_rx_kib_per_s", t_us);
	}
	return NVML_SUCCESS;
}

// nvmlProcessInfo_t is the v2 layout for both _v2 and _v3.
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	int64_t t = now_ms();
	std::vector<nvmlProcessInfo_t> list;
	for (auto &p : d->processes)
		if (alive(p, t))
			for (unsigned pid : pids_of(p))
				list.push_back({pid, (unsigned long long)value_at(p.steps, "mem_used", t), 0xFFFFFFFFu,
						0xFFFFFFFFu});
	if (*count < list.size()) {
		*count = unsigned(list.size());
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	if (!list.empty() && !infos)
		return NVML_ERROR_INVALID_ARGUMENT;
	std::copy(list.begin(), list.end(), infos);
	*count = unsigned(list.size());
	return NVML_SUCCESS;
}

// The "driver" samples every proc_sample_ms from the origin. A query returns
// per process the mean of its samples newer than lastSeen (all of them for
// 0), stamped with the newest one's CLOCK_REALTIME microseconds, as NVML does.
API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *out, unsigned *count,
						 unsigned long long last_seen_us)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	const unsigned long long origin_us = g_origin_real_ns / 1000;
	const int64_t newest_ms = now_ms() / g_proc_sample_ms * g_proc_sample_ms;
	std::vector<nvmlProcessUtilizationSample_t> list;
	for (auto &p : d->processes) {
		double sm = 0, mem = 0;
		int n = 0;
		for (int64_t g = newest_ms; g >= 0 && origin_us + uint64_t(g) * 1000 > last_seen_us;
		     g -= g_proc_sample_ms)
			if (alive(p, g)) {
				sm += value_at(p.steps, "sm_util", g);
				mem += value_at(p.steps, "mem_util", g);
				n++;
			}
		if (n)
			for (unsigned pid : pids_of(p))
				list.push_back({pid, origin_us + uint64_t(newest_ms) * 1000, unsigned(sm / n),
						unsigned(mem / n), 0, 0});
	}
	if (list.empty())
		return NVML_ERROR_NOT_FOUND;
	if (!out || *count < list.size()) {
		*count = unsigned(list.size());
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	std::copy(list.begin(), list.end(), out);
	*count = unsigned(list.size());
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	std::lock_guard lock(g_mu);
	if (!g_inits)
		return NVML_ERROR_UNINITIALIZED;
	*set = new EventSet;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	*types = kXid | kDoubleBitEcc;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set)
{
	if (nvmlReturn_t rc = enter(__func__, d))
		return rc;
	std::lock_guard lock(g_mu);
	set->registered[d->index] |= types;
	return NVML_SUCCESS;
}

// Waits for the next scripted event of a registered device and type that
// this set has not delivered yet, at most timeout ms.
API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms)
{
	if (!set || !data)
		return NVML_ERROR_INVALID_ARGUMENT;
	auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
	for (;;) {
		int64_t next_ms = INT64_MAX;
		{
			std::lock_guard lock(g_mu);
			if (!g_inits)
				return NVML_ERROR_UNINITIALIZED;
			int64_t t = now_ms();
			for (auto &[index, types] : set->registered) {
				Device &dev = g_devices[index];
				for (size_t i = 0; i < dev.events.size(); i++) {
					auto &e = dev.events[i];
					if (!(e.type & types) || set->delivered.count({index, i}) ||
					    e.at_ms >= dev.lost_at_ms)
						continue;
					if (e.at_ms <= t) {
						set->delivered.insert({index, i});
						*data = {&dev, e.type, e.type == kXid ? e.data : 0, 0xFFFFFFFFu,
							 0xFFFFFFFFu};
						return NVML_SUCCESS;
					}
					next_ms = std::min(next_ms, e.at_ms);
				}
			}
		}
		auto now = std::chrono::steady_clock::now();
		if (now >= deadline)
			return NVML_ERROR_TIMEOUT;
		auto wake = deadline;
		if (next_ms != INT64_MAX)
			wake = std::min(wake,
					std::chrono::steady_clock::time_point(
						std::chrono::nanoseconds(g_origin_ns + uint64_t(next_ms) * 1000000)));
		std::this_thread::sleep_until(std::max(wake, now + std::chrono::microseconds(100)));
	}
}

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	delete set;
	return NVML_SUCCESS;
}
