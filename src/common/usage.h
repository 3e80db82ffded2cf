// SPDX-License-Identifier: Apache-2.0
// eacgm's own cost, as the kernel accounts it: what an operator must know
// before leaving a tracer attached to a job (recorded in each recording's
// meta, and measured by bench/train_cost.py).
#pragma once
#include <sys/resource.h>

namespace eacgm {

struct SelfUsage {
	double cpu_s = 0;    // user + system, every thread of this process
	long max_rss_kb = 0; // peak resident set
};

inline SelfUsage self_usage()
{
	rusage ru{};
	getrusage(RUSAGE_SELF, &ru);
	auto secs = [](const timeval &t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
	return {secs(ru.ru_utime) + secs(ru.ru_stime), ru.ru_maxrss};
}

} // namespace eacgm
