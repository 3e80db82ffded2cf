// SPDX-License-Identifier: Apache-2.0
// NVML is loaded at run time: a machine without the NVIDIA driver has no
// libnvidia-ml.so.1, and eacgm must still build and record the other layers
// there. Its few types and functions are declared below from nvml.h's ABI.
//
// Two threads per collector: the sampler reads every device at --gpu-hz
// (NVML calls take from microseconds to milliseconds each, too slow for the
// record loop), the watcher blocks in nvmlEventSetWait_v2 for XID and
// double-bit ECC events. collect() only hands over what they gathered.
#include "layers/gpu.h"

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bitset>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/layers.h"

namespace eacgm {
namespace {

// --- The part of NVML's ABI (nvml.h) that eacgm uses -----------------------
using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st *;
struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st *;

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_LIBRARY_NOT_FOUND = 12;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_MEMORY = 20;
constexpr int NVML_TEMPERATURE_GPU = 0;              // nvmlTemperatureSensors_t
constexpr int NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2; // nvmlClockType_t
constexpr int NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1;
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0; // nvmlEccCounterType_t: reset when the driver loads
constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8;
// Cumulative KiB over all links when scopeId is UINT_MAX.
constexpr unsigned NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138;
constexpr unsigned NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ull;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96; // also the UUID's

struct nvmlUtilization_t {
	unsigned int gpu, memory;
};
struct nvmlMemory_t {
	unsigned long long total, free, used;
};
// nvmlProcessInfo_v2_t, which _v3 also takes.
struct nvmlProcessInfo_t {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
};
struct nvmlProcessUtilizationSample_t {
	unsigned int pid;
	unsigned long long timeStamp; // CLOCK_REALTIME, microseconds
	unsigned int smUtil, memUtil, encUtil, decUtil;
};
struct nvmlEventData_t {
	nvmlDevice_t device;
	unsigned long long eventType, eventData; // eventData: the XID
	unsigned int gpuInstanceId, computeInstanceId;
};
union nvmlValue_t {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	long long sllVal;
	unsigned short usVal;
};
struct nvmlFieldValue_t {
	unsigned int fieldId, scopeId;
	long long timestamp; // CLOCK_REALTIME, microseconds
	long long latencyUsec;
	int valueType; // nvmlValueType_t
	nvmlReturn_t nvmlReturn;
	nvmlValue_t value;
};
static_assert(sizeof(nvmlProcessInfo_t) == 24 && sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(sizeof(nvmlEventData_t) == 32 && sizeof(nvmlFieldValue_t) == 40);

// nvmlClocksEventReason* bits (formerly nvmlClocksThrottleReason*).
constexpr std::pair<unsigned long long, const char *> kThrottleReasons[] = {
	{0x1, "gpu_idle"},
	{0x2, "applications_clocks_setting"},
	{0x4, "sw_power_cap"},
	{0x8, "hw_slowdown"},
	{0x10, "sync_boost"},
	{0x20, "sw_thermal_slowdown"},
	{0x40, "hw_thermal_slowdown"},
	{0x80, "hw_power_brake_slowdown"},
	{0x100, "display_clock_setting"},
};

nlohmann::json throttle_names(unsigned long long mask)
{
	auto names = nlohmann::json::array();
	for (auto &[bit, name] : kThrottleReasons)
		if (mask & bit) {
			names.push_back(name);
			mask &= ~bit;
		}
	for (unsigned long long bit = 1; mask; bit <<= 1) // bits newer than this list
		if (mask & bit) {
			char hex[24];
			snprintf(hex, sizeof hex, "0x%llx", bit);
			names.push_back(hex);
			mask &= ~bit;
		}
	return names;
}

// --- The library ------------------------------------------------------------
struct Nvml {
	struct Closer {
		void operator()(void *h) const { dlclose(h); }
	};
	std::unique_ptr<void, Closer> lib;
	std::string path;

	nvmlReturn_t (*Init_v2)() = nullptr;
	nvmlReturn_t (*Shutdown)() = nullptr;
	const char *(*ErrorString)(nvmlReturn_t) = nullptr;
	nvmlReturn_t (*DeviceGetCount_v2)(unsigned *) = nullptr;
	nvmlReturn_t (*DeviceGetHandleByIndex_v2)(unsigned, nvmlDevice_t *) = nullptr;
	// Optional: a function this driver lacks reads as not supported.
	nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char *, unsigned) = nullptr;
	nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char *, unsigned) = nullptr;
	nvmlReturn_t (*DeviceGetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t *) = nullptr;
	nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *) = nullptr;
	nvmlReturn_t (*DeviceGetTemperature)(nvmlDevice_t, int, unsigned *) = nullptr;
	nvmlReturn_t (*DeviceGetPowerUsage)(nvmlDevice_t, unsigned *) = nullptr;
	nvmlReturn_t (*DeviceGetEnforcedPowerLimit)(nvmlDevice_t, unsigned *) = nullptr;
	nvmlReturn_t (*DeviceGetClockInfo)(nvmlDevice_t, int, unsigned *) = nullptr;
	nvmlReturn_t (*DeviceGetClocksReasons)(nvmlDevice_t, unsigned long long *) = nullptr;
	nvmlReturn_t (*DeviceGetPcieThroughput)(nvmlDevice_t, int, unsigned *) = nullptr;
	nvmlReturn_t (*DeviceGetTotalEccErrors)(nvmlDevice_t, int, int, unsigned long long *) = nullptr;
	nvmlReturn_t (*DeviceGetFanSpeed)(nvmlDevice_t, unsigned *) = nullptr;
	nvmlReturn_t (*DeviceGetFieldValues)(nvmlDevice_t, int, nvmlFieldValue_t *) = nullptr;
	nvmlReturn_t (*DeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *) = nullptr;
	nvmlReturn_t (*DeviceGetProcessUtilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *,
						    unsigned long long) = nullptr;
	nvmlReturn_t (*EventSetCreate)(nvmlEventSet_t *) = nullptr;
	nvmlReturn_t (*DeviceGetSupportedEventTypes)(nvmlDevice_t, unsigned long long *) = nullptr;
	nvmlReturn_t (*DeviceRegisterEvents)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
	nvmlReturn_t (*EventSetWait_v2)(nvmlEventSet_t, nvmlEventData_t *, unsigned) = nullptr;
	nvmlReturn_t (*EventSetFree)(nvmlEventSet_t) = nullptr;

	std::string error(nvmlReturn_t rc) const
	{
		const char *s = ErrorString(rc);
		return s ? s : "NVML error " + std::to_string(rc);
	}
};

// The kind of an NVML failure: no driver is not found, and so on.
ErrorKind kind_of_nvml(nvmlReturn_t rc)
{
	switch (rc) {
	case NVML_ERROR_NO_PERMISSION: return ErrorKind::Permission;
	case NVML_ERROR_NOT_FOUND:
	case NVML_ERROR_DRIVER_NOT_LOADED:
	case NVML_ERROR_LIBRARY_NOT_FOUND: return ErrorKind::NotFound;
	case NVML_ERROR_MEMORY: return ErrorKind::NoSpace;
	default: return ErrorKind::Other;
	}
}

template <class F>
void bind(void *lib, F &f, std::initializer_list<const char *> names)
{
	for (auto *n : names)
		if ((f = reinterpret_cast<F>(dlsym(lib, n))))
			return;
}

Result<Nvml> load_nvml(const std::string &library)
{
	Nvml n;
	n.path = library;
	n.lib.reset(dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL));
	if (!n.lib) {
		if (library.find('/') != std::string::npos && access(library.c_str(), F_OK) == 0)
			return make_error(ErrorKind::BadInput, // there, but not a library this process can load
					  "gpu layer unavailable: cannot load " + library + ": " + dlerror());
		return make_error(ErrorKind::NotFound,
				  "gpu layer unavailable: " + library + " not found (no NVIDIA driver)");
	}
	void *l = n.lib.get();
	bind(l, n.Init_v2, {"nvmlInit_v2"});
	bind(l, n.Shutdown, {"nvmlShutdown"});
	bind(l, n.ErrorString, {"nvmlErrorString"});
	bind(l, n.DeviceGetCount_v2, {"nvmlDeviceGetCount_v2"});
	bind(l, n.DeviceGetHandleByIndex_v2, {"nvmlDeviceGetHandleByIndex_v2"});
	std::pair<const void *, const char *> required[] = {
		{(const void *)n.Init_v2, "nvmlInit_v2"},
		{(const void *)n.Shutdown, "nvmlShutdown"},
		{(const void *)n.ErrorString, "nvmlErrorString"},
		{(const void *)n.DeviceGetCount_v2, "nvmlDeviceGetCount_v2"},
		{(const void *)n.DeviceGetHandleByIndex_v2, "nvmlDeviceGetHandleByIndex_v2"}};
	for (auto &[f, name] : required)
		if (!f)
			return make_error(ErrorKind::NotFound,
					  "gpu layer unavailable: " + library + " has no " + name +
						  "; it is not NVML or is too old: update the NVIDIA driver");
	bind(l, n.DeviceGetName, {"nvmlDeviceGetName"});
	bind(l, n.DeviceGetUUID, {"nvmlDeviceGetUUID"});
	bind(l, n.DeviceGetUtilizationRates, {"nvmlDeviceGetUtilizationRates"});
	bind(l, n.DeviceGetMemoryInfo, {"nvmlDeviceGetMemoryInfo"});
	bind(l, n.DeviceGetTemperature, {"nvmlDeviceGetTemperature"});
	bind(l, n.DeviceGetPowerUsage, {"nvmlDeviceGetPowerUsage"});
	bind(l, n.DeviceGetEnforcedPowerLimit, {"nvmlDeviceGetEnforcedPowerLimit"});
	bind(l, n.DeviceGetClockInfo, {"nvmlDeviceGetClockInfo"});
	// Renamed in CUDA 12.2's NVML; the old name is deprecated.
	bind(l, n.DeviceGetClocksReasons,
	     {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
	bind(l, n.DeviceGetPcieThroughput, {"nvmlDeviceGetPcieThroughput"});
	bind(l, n.DeviceGetTotalEccErrors, {"nvmlDeviceGetTotalEccErrors"});
	bind(l, n.DeviceGetFanSpeed, {"nvmlDeviceGetFanSpeed"});
	bind(l, n.DeviceGetFieldValues, {"nvmlDeviceGetFieldValues"});
	bind(l, n.DeviceGetComputeRunningProcesses,
	     {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
	bind(l, n.DeviceGetProcessUtilization, {"nvmlDeviceGetProcessUtilization"});
	bind(l, n.EventSetCreate, {"nvmlEventSetCreate"});
	bind(l, n.DeviceGetSupportedEventTypes, {"nvmlDeviceGetSupportedEventTypes"});
	bind(l, n.DeviceRegisterEvents, {"nvmlDeviceRegisterEvents"});
	bind(l, n.EventSetWait_v2, {"nvmlEventSetWait_v2"});
	bind(l, n.EventSetFree, {"nvmlEventSetFree"});
	return n;
}

// --- Devices ----------------------------------------------------------------
// What is read per device, each with its own memory of "not supported".
enum Field {
	kUtil,
	kMemory,
	kTemp,
	kPower,
	kPowerLimit,
	kClockSm,
	kClockMem,
	kThrottle,
	kPcie,
	kEcc,
	kFan,
	kNvlink,
	kProcesses,
	kProcessUtil,
	kFieldCount
};
constexpr const char *kFieldFunction[kFieldCount] = {"nvmlDeviceGetUtilizationRates",
						     "nvmlDeviceGetMemoryInfo",
						     "nvmlDeviceGetTemperature",
						     "nvmlDeviceGetPowerUsage",
						     "nvmlDeviceGetEnforcedPowerLimit",
						     "nvmlDeviceGetClockInfo(SM)",
						     "nvmlDeviceGetClockInfo(MEM)",
						     "nvmlDeviceGetCurrentClocksEventReasons",
						     "nvmlDeviceGetPcieThroughput",
						     "nvmlDeviceGetTotalEccErrors",
						     "nvmlDeviceGetFanSpeed",
						     "nvmlDeviceGetFieldValues(NVLink throughput)",
						     "nvmlDeviceGetComputeRunningProcesses",
						     "nvmlDeviceGetProcessUtilization"};

struct Device {
	unsigned index = 0;
	nvmlDevice_t handle = nullptr;
	std::string key, name, uuid;
	bool lost = false;
	std::bitset<kFieldCount> unsupported; // NVML said so once: never asked again
	std::bitset<kFieldCount> warned;      // other failures are said once
	bool throttle_known = false;
	unsigned long long throttle = 0;
	bool nvlink_known = false; // the previous cumulative NVLink counters
	long long nvlink_us = 0;
	unsigned long long nvlink_tx = 0, nvlink_rx = 0;
	std::vector<nvmlProcessInfo_t> procs; // grows on NVML_ERROR_INSUFFICIENT_SIZE
	std::vector<nvmlProcessUtilizationSample_t> util_samples;
	unsigned long long util_seen_us = 0; // lastSeenTimeStamp: each sample is read once
};

class GpuCollector final : public Collector {
public:
	GpuCollector(Nvml nvml, double hz) : nvml_(std::move(nvml)), hz_(hz) {}
	~GpuCollector() override { stop(); }
	const char *layer() const override { return layer::gpu; }
	Result<void> open_devices();
	void start();
	void collect(uint64_t now_ns, const std::set<uint32_t> &traced, std::vector<Metric> &metrics,
		     std::vector<Event> &events) override;
	void stop() override;
	std::vector<std::string> take_warnings() override;

private:
	struct Batch {
		std::vector<Metric> metrics;
		std::vector<Event> events;
		std::vector<std::string> warnings;
	};
	void sample_loop();
	void watch_loop();
	void sample(Device &d, Batch &b);
	bool check(Device &d, Field f, nvmlReturn_t rc, uint64_t ts, Batch &b);
	void hand_over(Batch &b);

	Nvml nvml_;
	double hz_;
	bool initialised_ = false;
	std::vector<Device> devices_;              // the sampler's, once it runs
	std::map<nvmlDevice_t, std::string> keys_; // read-only once threads run
	nvmlEventSet_t events_set_ = nullptr;

	std::mutex mu_;
	std::condition_variable wake_;
	bool stopping_ = false;
	bool stopped_ = false;
	Batch pending_;
	std::thread sampler_, watcher_;
};

Result<void> GpuCollector::open_devices()
{
	auto &n = nvml_;
	if (nvmlReturn_t rc = n.Init_v2(); rc != NVML_SUCCESS)
		return make_error(kind_of_nvml(rc),
				  "gpu layer unavailable: nvmlInit_v2 failed: " + n.error(rc) +
					  "; check the driver with nvidia-smi");
	initialised_ = true;
	unsigned count = 0;
	if (nvmlReturn_t rc = n.DeviceGetCount_v2(&count); rc != NVML_SUCCESS)
		return make_error(kind_of_nvml(rc),
				  "gpu layer unavailable: nvmlDeviceGetCount_v2 failed: " + n.error(rc) +
					  "; check the driver with nvidia-smi");
	Batch b;
	uint64_t ts = mono_ns();
	for (unsigned i = 0; i < count; i++) {
		Device d;
		d.index = i;
		d.key = "gpu" + std::to_string(i);
		if (nvmlReturn_t rc = n.DeviceGetHandleByIndex_v2(i, &d.handle); rc != NVML_SUCCESS) {
			b.warnings.push_back("gpu layer: " + d.key +
					     " is not recorded: nvmlDeviceGetHandleByIndex_v2 failed: " + n.error(rc));
			continue;
		}
		char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
		if (n.DeviceGetName && n.DeviceGetName(d.handle, buf, sizeof buf) == NVML_SUCCESS)
			d.name = buf;
		buf[0] = 0;
		if (n.DeviceGetUUID && n.DeviceGetUUID(d.handle, buf, sizeof buf) == NVML_SUCCESS)
			d.uuid = buf;
		const void *functions[kFieldCount] = {(const void *)n.DeviceGetUtilizationRates,
						      (const void *)n.DeviceGetMemoryInfo,
						      (const void *)n.DeviceGetTemperature,
						      (const void *)n.DeviceGetPowerUsage,
						      (const void *)n.DeviceGetEnforcedPowerLimit,
						      (const void *)n.DeviceGetClockInfo,
						      (const void *)n.DeviceGetClockInfo,
						      (const void *)n.DeviceGetClocksReasons,
						      (const void *)n.DeviceGetPcieThroughput,
						      (const void *)n.DeviceGetTotalEccErrors,
						      (const void *)n.DeviceGetFanSpeed,
						      (const void *)n.DeviceGetFieldValues,
						      (const void *)n.DeviceGetComputeRunningProcesses,
						      (const void *)n.DeviceGetProcessUtilization};
		for (int f = 0; f < kFieldCount; f++)
			d.unsupported[f] = functions[f] == nullptr;
		// The device's identity, once, for the trace and the store.
		b.events.push_back(Event{
			ts, layer::gpu, "device", d.key, 0, 0, {{"index", i}, {"name", d.name}, {"uuid", d.uuid}}});
		keys_[d.handle] = d.key;
		devices_.push_back(std::move(d));
	}
	if (devices_.empty())
		return make_error(ErrorKind::NotFound,
				  count ? "gpu layer unavailable: none of the " + std::to_string(count) +
						  " GPUs could be opened; check them with nvidia-smi"
					: "gpu layer unavailable: NVML finds no GPU; check with nvidia-smi");
	pending_ = std::move(b);

	// XID and double-bit ECC events, where the devices report them.
	if (n.EventSetCreate && n.DeviceRegisterEvents && n.EventSetWait_v2 && n.EventSetFree &&
	    n.EventSetCreate(&events_set_) == NVML_SUCCESS) {
		bool any = false;
		for (auto &d : devices_) {
			unsigned long long types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;
			unsigned long long supported = types;
			if (n.DeviceGetSupportedEventTypes &&
			    n.DeviceGetSupportedEventTypes(d.handle, &supported) != NVML_SUCCESS)
				supported = 0;
			if ((types &= supported) &&
			    n.DeviceRegisterEvents(d.handle, types, events_set_) == NVML_SUCCESS)
				any = true;
		}
		if (!any) {
			n.EventSetFree(events_set_);
			events_set_ = nullptr;
		}
	}
	return {};
}

void GpuCollector::start()
{
	sampler_ = std::thread([this] { sample_loop(); });
	if (events_set_)
		watcher_ = std::thread([this] { watch_loop(); });
}

// The outcome of one read: true when it gave a value. Not supported is
// remembered, a lost GPU ends the device's sampling, other failures skip the
// value this time and are said once.
bool GpuCollector::check(Device &d, Field f, nvmlReturn_t rc, uint64_t ts, Batch &b)
{
	if (rc == NVML_SUCCESS)
		return true;
	if (rc == NVML_ERROR_NOT_SUPPORTED) {
		d.unsupported.set(f);
	} else if (rc == NVML_ERROR_GPU_IS_LOST) {
		if (!d.lost) {
			d.lost = true;
			b.events.push_back(Event{ts,
						 layer::gpu,
						 "device_lost",
						 d.key,
						 0,
						 0,
						 {{"name", d.name}, {"uuid", d.uuid}, {"call", kFieldFunction[f]}}});
			b.warnings.push_back("gpu layer: " + d.key + " (" + d.name + ") was lost (" + nvml_.error(rc) +
					     "): no samples from it after this; the other GPUs are still recorded. "
					     "The kernel log (dmesg) names the XID that took it off the bus");
		}
	} else if (!d.warned.test(f)) {
		d.warned.set(f);
		b.warnings.push_back("gpu layer: " + d.key + ": " + kFieldFunction[f] + " failed: " + nvml_.error(rc) +
				     "; its values are missing where it fails");
	}
	return false;
}

double field_value(const nvmlFieldValue_t &v)
{
	switch (v.valueType) {
	case 0: return v.value.dVal;
	case 1: return v.value.uiVal;
	case 2: return double(v.value.ulVal);
	case 3: return double(v.value.ullVal);
	case 4: return double(v.value.sllVal);
	case 5: return v.value.siVal;
	case 6: return v.value.usVal;
	default: return 0;
	}
}

void GpuCollector::sample(Device &d, Batch &b)
{
	auto &n = nvml_;
	nvmlDevice_t h = d.handle;
	const uint64_t ts = mono_ns(); // one time for all of this device's reads
	auto put = [&](const char *name, double v, uint32_t pid = 0) {
		b.metrics.push_back(Metric{ts, layer::gpu, name, d.key, pid, v});
	};
	// Calls NVML for a field still worth asking; true when it answered.
	auto read = [&](Field f, auto call) { return !d.lost && !d.unsupported.test(f) && check(d, f, call(), ts, b); };

	nvmlUtilization_t u{};
	if (read(kUtil, [&] { return n.DeviceGetUtilizationRates(h, &u); })) {
		put("util_gpu_pct", u.gpu);
		put("util_mem_pct", u.memory);
	}
	nvmlMemory_t m{};
	if (read(kMemory, [&] { return n.DeviceGetMemoryInfo(h, &m); })) {
		put("mem_used_bytes", double(m.used));
		put("mem_total_bytes", double(m.total));
	}
	unsigned v = 0, v2 = 0;
	if (read(kTemp, [&] { return n.DeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &v); }))
		put("temp_c", v);
	if (read(kPower, [&] { return n.DeviceGetPowerUsage(h, &v); })) // milliwatts
		put("power_w", v / 1000.0);
	if (read(kPowerLimit, [&] { return n.DeviceGetEnforcedPowerLimit(h, &v); }))
		put("power_limit_w", v / 1000.0);
	if (read(kClockSm, [&] { return n.DeviceGetClockInfo(h, NVML_CLOCK_SM, &v); }))
		put("clock_sm_mhz", v);
	if (read(kClockMem, [&] { return n.DeviceGetClockInfo(h, NVML_CLOCK_MEM, &v); }))
		put("clock_mem_mhz", v);
	unsigned long long mask = 0;
	if (read(kThrottle, [&] { return n.DeviceGetClocksReasons(h, &mask); })) {
		put("throttle_reasons_mask", double(mask));
		// An event when the set changes, and at the start unless it is empty.
		if (d.throttle_known ? mask != d.throttle : mask != 0)
			b.events.push_back(Event{
				ts, layer::gpu, "clock_throttle", d.key, 0, 0, {{"reasons", throttle_names(mask)}}});
		d.throttle_known = true;
		d.throttle = mask;
	}
	// KB/s over NVML's last 20 ms window; NVML's KB is 1024 bytes.
	if (read(kPcie, [&] {
		    nvmlReturn_t rc = n.DeviceGetPcieThroughput(h, NVML_PCIE_UTIL_TX_BYTES, &v);
		    return rc ? rc : n.DeviceGetPcieThroughput(h, NVML_PCIE_UTIL_RX_BYTES, &v2);
	    })) {
		put("pcie_tx_bytes_per_s", v * 1024.0);
		put("pcie_rx_bytes_per_s", v2 * 1024.0);
	}
	unsigned long long corrected = 0, uncorrected = 0;
	if (read(kEcc, [&] {
		    nvmlReturn_t rc = n.DeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
								&corrected);
		    return rc ? rc
			      : n.DeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
							  &uncorrected);
	    })) {
		put("ecc_volatile_corrected", double(corrected));
		put("ecc_volatile_uncorrected", double(uncorrected));
	}
	if (read(kFan, [&] { return n.DeviceGetFanSpeed(h, &v); }))
		put("fan_pct", v);

	// NVLink: cumulative KiB summed over the links, turned into a rate
	// between two readings by NVML's own timestamps.
	nvmlFieldValue_t fv[2] = {};
	fv[0].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
	fv[1].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
	fv[0].scopeId = fv[1].scopeId = UINT_MAX;
	if (read(kNvlink, [&] {
		    nvmlReturn_t rc = n.DeviceGetFieldValues(h, 2, fv);
		    return rc ? rc : fv[0].nvmlReturn ? fv[0].nvmlReturn : fv[1].nvmlReturn;
	    })) {
		auto tx = (unsigned long long)field_value(fv[0]), rx = (unsigned long long)field_value(fv[1]);
		long long us = fv[0].timestamp ? fv[0].timestamp : (long long)(ts / 1000);
		if (d.nvlink_known && us > d.nvlink_us && tx >= d.nvlink_tx && rx >= d.nvlink_rx) {
			double s = (us - d.nvlink_us) / 1e6;
			put("nvlink_tx_bytes_per_s", (tx - d.nvlink_tx) * 1024.0 / s);
			put("nvlink_rx_bytes_per_s", (rx - d.nvlink_rx) * 1024.0 / s);
		}
		d.nvlink_known = true;
		d.nvlink_us = us;
		d.nvlink_tx = tx;
		d.nvlink_rx = rx;
	}

	// Memory per process. The list may grow between the sizing call and the
	// read: retry a few times with room to spare.
	unsigned count = 0;
	if (read(kProcesses, [&] {
		    nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_SIZE;
		    for (int tries = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && tries < 4; tries++) {
			    if (tries)
				    d.procs.resize(count + 8);
			    count = unsigned(d.procs.size());
			    rc = n.DeviceGetComputeRunningProcesses(h, &count,
								    d.procs.empty() ? nullptr : d.procs.data());
		    }
		    return rc;
	    })) {
		std::map<uint32_t, double> per_pid; // a process has one entry per MIG instance
		for (unsigned i = 0; i < count && i < d.procs.size(); i++)
			if (d.procs[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE)
				per_pid[d.procs[i].pid] += double(d.procs[i].usedGpuMemory);
		for (auto &[pid, bytes] : per_pid)
			put("proc_mem_used_bytes", bytes, pid);
	}

	// Utilisation per process: NVML keeps samples with their own CLOCK_REALTIME
	// timestamps; asking for those after the last one seen reads each once.
	if (!d.lost && !d.unsupported.test(kProcessUtil)) {
		unsigned k = 0;
		nvmlReturn_t rc = n.DeviceGetProcessUtilization(h, nullptr, &k, d.util_seen_us);
		if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
			d.util_samples.resize(k);
			rc = n.DeviceGetProcessUtilization(h, d.util_samples.data(), &k, d.util_seen_us);
		} else if (rc == NVML_SUCCESS) {
			k = 0; // nothing to size, nothing read
		}
		// NOT_FOUND: no sample since the last; INSUFFICIENT_SIZE again: the
		// list grew in between, read next time.
		if (rc != NVML_ERROR_NOT_FOUND && rc != NVML_ERROR_INSUFFICIENT_SIZE &&
		    check(d, kProcessUtil, rc, ts, b)) {
			int64_t realtime_to_mono = int64_t(mono_ns()) - int64_t(clock_ns(CLOCK_REALTIME));
			for (unsigned i = 0; i < k && i < d.util_samples.size(); i++) {
				auto &s = d.util_samples[i];
				if (s.timeStamp <= d.util_seen_us)
					continue;
				uint64_t at = uint64_t(int64_t(s.timeStamp) * 1000 + realtime_to_mono);
				b.metrics.push_back(
					Metric{at, layer::gpu, "proc_util_sm_pct", d.key, s.pid, double(s.smUtil)});
				b.metrics.push_back(
					Metric{at, layer::gpu, "proc_util_mem_pct", d.key, s.pid, double(s.memUtil)});
			}
			for (unsigned i = 0; i < k && i < d.util_samples.size(); i++)
				d.util_seen_us = std::max(d.util_seen_us, d.util_samples[i].timeStamp);
		}
	}
}

void GpuCollector::hand_over(Batch &b)
{
	std::lock_guard lock(mu_);
	pending_.metrics.insert(pending_.metrics.end(), std::make_move_iterator(b.metrics.begin()),
				std::make_move_iterator(b.metrics.end()));
	pending_.events.insert(pending_.events.end(), std::make_move_iterator(b.events.begin()),
			       std::make_move_iterator(b.events.end()));
	pending_.warnings.insert(pending_.warnings.end(), b.warnings.begin(), b.warnings.end());
	b = Batch{};
}

void GpuCollector::sample_loop()
{
	using clock = std::chrono::steady_clock; // CLOCK_MONOTONIC
	const auto period = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(1.0 / hz_));
	auto next = clock::now();
	for (;;) {
		Batch b;
		for (auto &d : devices_)
			if (!d.lost)
				sample(d, b);
		hand_over(b);
		// A fixed grid, not "period after the last sample": samples stay
		// evenly spaced however long the reads took; a late tick is skipped.
		next += period;
		if (auto now = clock::now(); next < now)
			next = now + period - (now - next) % period;
		std::unique_lock lock(mu_);
		if (wake_.wait_until(lock, next, [this] { return stopping_; }))
			return;
	}
}

void GpuCollector::watch_loop()
{
	for (;;) {
		{
			std::lock_guard lock(mu_);
			if (stopping_)
				return;
		}
		// A short timeout keeps stop() prompt: NVML's wait cannot be interrupted.
		nvmlEventData_t e{};
		nvmlReturn_t rc = nvml_.EventSetWait_v2(events_set_, &e, 100);
		if (rc == NVML_ERROR_TIMEOUT)
			continue;
		if (rc != NVML_SUCCESS) { // a lost GPU, say: do not spin on it
			std::unique_lock lock(mu_);
			wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_; });
			continue;
		}
		uint64_t ts = mono_ns();
		auto it = keys_.find(e.device);
		std::string key = it == keys_.end() ? "" : it->second;
		Batch b;
		if (e.eventType & nvmlEventTypeXidCriticalError)
			b.events.push_back(Event{ts, layer::gpu, "xid", key, 0, 0, {{"xid", e.eventData}}});
		if (e.eventType & nvmlEventTypeDoubleBitEccError)
			b.events.push_back(
				Event{ts, layer::gpu, "ecc_double_bit", key, 0, 0, nlohmann::json::object()});
		hand_over(b);
	}
}

void GpuCollector::collect(uint64_t, const std::set<uint32_t> &traced, std::vector<Metric> &metrics,
			   std::vector<Event> &events)
{
	Batch b;
	{
		std::lock_guard lock(mu_);
		std::swap(b.metrics, pending_.metrics);
		std::swap(b.events, pending_.events);
	}
	// Per-process values only for the traced processes; NVML lists them all.
	std::erase_if(b.metrics, [&](const Metric &m) { return m.pid && !traced.count(m.pid); });
	// In time order: per-process utilisation comes with NVML's own times.
	auto by_time = [](auto &x, auto &y) { return x.ts_ns < y.ts_ns; };
	std::stable_sort(b.metrics.begin(), b.metrics.end(), by_time);
	std::stable_sort(b.events.begin(), b.events.end(), by_time);
	metrics.insert(metrics.end(), std::make_move_iterator(b.metrics.begin()),
		       std::make_move_iterator(b.metrics.end()));
	events.insert(events.end(), std::make_move_iterator(b.events.begin()), std::make_move_iterator(b.events.end()));
}

std::vector<std::string> GpuCollector::take_warnings()
{
	std::lock_guard lock(mu_);
	return std::exchange(pending_.warnings, {});
}

void GpuCollector::stop()
{
	{
		std::lock_guard lock(mu_);
		if (stopped_)
			return;
		stopped_ = stopping_ = true;
	}
	wake_.notify_all();
	if (sampler_.joinable())
		sampler_.join();
	if (watcher_.joinable())
		watcher_.join();
	if (events_set_)
		nvml_.EventSetFree(events_set_);
	events_set_ = nullptr;
	if (initialised_)
		nvml_.Shutdown();
	initialised_ = false;
}

} // namespace

Result<std::unique_ptr<Collector>> open_gpu_collector(const GpuOptions &o)
{
	if (!(o.hz >= 0.1 && o.hz <= 1000)) {
		char hz[32];
		snprintf(hz, sizeof hz, "%g", o.hz);
		return make_error(ErrorKind::BadInput,
				  std::string("gpu layer: a sampling rate of ") + hz +
					  " Hz is out of range; give --gpu-hz between 0.1 and 1000");
	}
	auto nvml = load_nvml(o.library);
	if (!nvml)
		return nvml.error();
	// Owns the initialised library from here: on failure its destructor shuts NVML down.
	auto c = std::make_unique<GpuCollector>(std::move(nvml.value()), o.hz);
	if (auto r = c->open_devices(); !r)
		return r.error();
	c->start();
	return std::unique_ptr<Collector>(std::move(c));
}

} // namespace eacgm
