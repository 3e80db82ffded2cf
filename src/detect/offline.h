// `eacgm detect` on a finished recording: the online detector replayed in
// time order with inline refits, so a file always gives the same answer
// and the same answer the live agent would have given.
#pragma once
#include <string>
#include <vector>

#include "common/model.h"
#include "detect/online.h"

namespace eacgm::detect {

struct OfflineReport {
	std::vector<Anomaly> anomalies; // by time
	std::vector<KeyStatus> keys;
	size_t spans = 0; // spans replayed (after the layer filter)
};

// layers: only spans of these layers (empty: all).
OfflineReport detect_recording(const Recording &rec, DetectOptions opt, const std::vector<std::string> &layers = {});

} // namespace eacgm::detect
