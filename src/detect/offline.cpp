#include "detect/offline.h"

#include <algorithm>

namespace eacgm::detect {

OfflineReport detect_recording(const Recording &rec, DetectOptions opt, const std::vector<std::string> &layers)
{
	opt.background = false;
	OnlineDetector det(opt);
	// The whole recording is known: every metric and event is context from
	// the start, so joins see the host intervals that end after a span
	// (live, those arrive a host interval late).
	for (const Metric &m : rec.metrics)
		det.observe(m);
	for (const Event &e : rec.events)
		det.observe(e);
	OfflineReport rep;
	// Spans are delivered when they end, but a file orders them by start;
	// by start is the order their gaps and windows are defined in.
	for (const Span &s : rec.spans) {
		if (!layers.empty() && std::find(layers.begin(), layers.end(), s.layer) == layers.end())
			continue;
		rep.spans++;
		if (auto a = det.observe(s))
			rep.anomalies.push_back(std::move(*a));
	}
	rep.keys = det.status();
	return rep;
}

} // namespace eacgm::detect
