// SPDX-License-Identifier: Apache-2.0
// A layer read from user space rather than from a ring buffer: NVML (gpu),
// host counters aggregated in the kernel (host). The record loop calls
// collect() when it wakes: at a collector's next_due_ns(), at a ring
// buffer's wake-up, or at the latest every 250 ms; what it appends goes to
// the store, the trace and the summary.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/model.h"

namespace eacgm {

class Collector {
public:
	virtual ~Collector() = default;
	virtual const char *layer() const = 0;
	// Appends what was measured since the last call (timestamps are
	// CLOCK_MONOTONIC ns). Must return quickly (well under a millisecond): a
	// collector whose source is slow samples on its own thread and hands
	// over here. traced: the processes of the recording (exited ones too); values about one
	// process are kept for these only.
	virtual void collect(uint64_t now_ns, const std::set<uint32_t> &traced, std::vector<Metric> &metrics,
			     std::vector<Event> &events) = 0;
	// When collect() should next be called (CLOCK_MONOTONIC ns): the record
	// loop sleeps until the earliest collector's, so an idle recording
	// wakes only when some layer has work.
	virtual uint64_t next_due_ns() const { return UINT64_MAX; }
	// Called once when the recording ends: a last collect() follows.
	virtual void stop() {}
	// Messages for the user, each at most once.
	virtual std::vector<std::string> take_warnings() { return {}; }
};

} // namespace eacgm
