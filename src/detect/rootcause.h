// SPDX-License-Identifier: Apache-2.0
// Why an event is anomalous: which of its features made it so, and what
// else happened around it (host, network, GPU, Python).
//
// Feature attribution, under the component the event was scored against
// (mean mu, precision P = cov^-1, standardised features z, delta = z - mu,
// h = P delta):
//  - contribution_j = delta_j * h_j. These sum to the squared Mahalanobis
//    distance delta' P delta, which is what lowers the log density
//    (log N = const - D^2 / 2), so share_j = contribution_j / D^2 says how
//    much of the "distance from normal" feature j accounts for. With
//    correlated features a share can be negative (the feature is where
//    the others predict it, pulling the event back).
//  - conditional z_j = h_j / sqrt(P_jj): feature j's distance, in standard
//    deviations, from the value the other features predict for it under
//    that component (E[z_j | z_-j] = mu_j - h_j / P_jj + delta_j ...).
//    It reads as "given everything else, duration is 40 sd too long".
//  - The call site is a categorical factor of the score (keymodel.h): its
//    part is its surprisal beyond the expected one (the entropy of the
//    training sites). Shares are of D^2 / 2 + that excess, the two things
//    that lower the log density below the mode's.
// Context causes, each with its evidence, found in [start - margin,
// end + margin]: TCP retransmits of the process, CPU interference (host
// interference_ns, key "<comm>:<pid>", and run-queue delay), GPU clock
// throttling (gpu event clock_throttle, metric throttle_reasons_mask), a
// call site the key rarely or never had in training. Causes are ranked by
// strength in [0, 1]: a feature's share, and for a context cause 0.5 plus
// half the share of the feature that measures it (so a retransmit beside a
// slow call ranks below the duration itself unless the retransmit feature
// carried the distance too).
#pragma once
#include <nlohmann/json.hpp>

#include "common/model.h"
#include "detect/features.h"
#include "detect/keymodel.h"
#include "detect/noise.h"

namespace eacgm::detect {

struct Attribution {
	unsigned feature = 0;
	double value = 0;   // display units (log undone)
	double typical = 0; // the component's mean, display units
	// The mode nearest the value: the component mean closest to it on this
	// feature alone, display units. A feature with several usual values (a
	// gap that is long before a step's first call and short before the
	// others) is measured against the one it came closest to, not against
	// the mode the call as a whole was scored under.
	double usual = 0;
	double z = 0;     // conditional z
	double share = 0; // of the squared Mahalanobis distance
};

// One per feature the model uses, largest share first.
std::vector<Attribution> attribute(const KeyModel &m, const Scored &s);

// How much slower than typical a call flagged for its duration or its gap
// must be to be worth reporting: min_slowdown times the typical value,
// min_excess_ns more (0 and 0: any), and, where noise_alpha > 0, more than
// the machine's own stalls explain (noise.h: the chance that they slowed
// as many of the function's calls by as much is below noise_alpha).
struct Worth {
	double min_slowdown = 0;
	uint64_t min_excess_ns = 0;
	double noise_alpha = 0;
	// A slowdown this long or longer is told without the stall test (0:
	// every slowdown takes it). make eval measured the stall test alone
	// (noise.h) losing single slowed calls of functions called thousands
	// of times (a ResNet convolution slowed once: 0 of 8 found, 8 of 8
	// with this bar): one call can never be more than the machine's
	// stalls of its size once those come a few times in the recording.
	uint64_t sure_ns = 0;
	// The stalls measured (the recording's, or the live windows'): set by
	// the detector that judges; null: none measured, not asked.
	const Noise *noise = nullptr;
	// The slowdown and the floor alone: for calls whose cause is measured
	// beside them (a straggler's arrival, others taking the CPU).
	bool met(double value, double typical) const
	{
		return value >= min_slowdown * typical && value - typical >= static_cast<double>(min_excess_ns);
	}
	// met(), and, under sure_ns, beyond the machine's stalls: a call of
	// `key` whose duration (gap: the gap before it) is `value` against
	// `typical`; `extra` as in Noise::chance.
	bool told(const std::string &key, bool gap, double value, double typical, size_t extra = 0) const
	{
		if (!met(value, typical))
			return false;
		if (sure_ns > 0 && value - typical >= static_cast<double>(sure_ns))
			return true;
		return noise_alpha <= 0 || !noise || noise->chance(key, gap, value - typical, extra) < noise_alpha;
	}
};

// The default: 2x; under 100 us, beyond the machine's stalls at 1%. A
// fixed 100 us floor, this default until the stalls were measured, hid a
// softmax slowed from 6 to 63 us on the AMD VMs (10x) and would hide any
// slowed kernel launch on a GPU node; slowdowns of 100 us and more are
// told as they were (Worth::sure_ns says why).
inline constexpr Worth kWorthTelling{2.0, 0, 0.01, 100'000};

// Whether a call over its key's threshold is reported: not when it is
// unusual mostly for being quicker than its kind (or sooner), nor only for
// the context it ran in (GPU power, clocks, the host's scheduling delay)
// while its own measures are typical (rootcause.cpp says why), nor when its
// first cause is its duration or gap and that is not worth it. key: the
// call's function (layer/name), whose stalls Worth::told weighs; extra as
// in Noise::chance (the live detector: 1, the call is not in its window).
bool reportable(const KeyModel &m, const Scored &s, const Worth &worth, const std::string &key, size_t extra = 0);

// Fills a.features and a.causes.
void explain(Anomaly &a, const Span &span, const Observation &o, const KeyModel &m, const Scored &s, const Context &ctx,
	     uint64_t margin_ns);

// Whether a host-layer interferer ("<comm>:<pid>") is an eacgm by its name:
// a recording agent, whose CPU is the overhead budget's business rather
// than a fault of the job (offline.cpp's Agent knows its pid too).
inline bool eacgm_by_name(const std::string &interferer)
{
	const auto colon = interferer.rfind(':');
	return colon != std::string::npos && interferer.compare(0, colon, "eacgm") == 0;
}

// Fault classes: every cause carries the class of fault it points to
// ("fault"), and an anomaly's class is its first cause's:
//   operator_slow    the call itself took longer (log_duration; a python
//                    layer span's: python_slow)
//   stall            it came late: time outside the traced calls before it
//                    (Python, I/O, waiting for a CPU) (log_gap)
//   cpu_contention   others ran on its CPUs (host interference, run-queue delay)
//   memory_pressure  tasks stalled on memory around it (PSI)
//   network          TCP retransmits of its process (host_log_retrans)
//   straggling_rank  a collective that waited for a rank that arrived last
//                    (offline.h, from the recording's other ranks)
//   gpu, data_size, code_path  GPU state or throttling, bytes moved, a rare
//                    call site
std::string fault_class(const Anomaly &a); // "" when the causes name none
// The class as users read it: "operator slow", "straggling rank".
std::string fault_name(const std::string &fault);

// The anomaly a flagged call is: where and when, its score against the
// threshold, explained.
Anomaly anomaly_of(const Span &span, const Observation &o, const KeyModel &m, const Scored &s, const Context &ctx,
		   uint64_t margin_ns);

} // namespace eacgm::detect
