// SPDX-License-Identifier: Apache-2.0
// The clock every event carries: CLOCK_MONOTONIC in ns, the clock of
// bpf_ktime_get_ns(), so times read in user space compare with the kernel's.
#pragma once
#include <cstdint>
#include <ctime>

namespace eacgm {

inline uint64_t clock_ns(clockid_t clock)
{
	timespec ts;
	clock_gettime(clock, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t mono_ns() { return clock_ns(CLOCK_MONOTONIC); }

} // namespace eacgm
