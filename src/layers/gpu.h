// SPDX-License-Identifier: Apache-2.0
// The gpu layer: NVIDIA GPUs read through NVML, loaded with dlopen so that
// eacgm builds and runs on machines without a driver. Per device (key
// "gpu<index>"): utilisation, memory, temperature, power, clocks, throttle
// reasons, PCIe and NVLink throughput, ECC counts, fan; per process:
// memory and SM/memory utilisation; XID and double-bit ECC events, and a
// device that falls off the bus.
#pragma once
#include <memory>
#include <string>

#include "common/result.h"
#include "layers/collector.h"

namespace eacgm {

struct GpuOptions {
	double hz = 10;                            // samples per second, per device
	std::string library = "libnvidia-ml.so.1"; // a name for the loader, or a path
};

// Loads NVML, initialises it and starts sampling every device on the
// collector's own threads. Fails with "gpu layer unavailable: ..." when
// there is no usable NVML or no GPU.
Result<std::unique_ptr<Collector>> open_gpu_collector(const GpuOptions &o);

} // namespace eacgm
