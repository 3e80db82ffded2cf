// SPDX-License-Identifier: Apache-2.0
// The span engine on a function of eacgm itself, in this process: what
// `doctor` checks the machine with and `probes` measures the per-call cost
// with, without depending on any other program.
#pragma once
#include <memory>

#include "common/result.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"

namespace eacgm {

struct SelfProbe {
	std::unique_ptr<ProcTracker> tracker;
	std::unique_ptr<SpanEngine> engine;
};

// Loads the real programs, probes `symbol` (a function of /proc/self/exe)
// with an empty spec (id 0) and traces this process.
Result<SelfProbe> probe_own_function(const char *symbol);

} // namespace eacgm
