// SPDX-License-Identifier: Apache-2.0
// The online detector as the first sink of the pipeline: every traced call
// is scored as it passes, against its function's model of the moment, and
// what it flags rides on with the batch to the sinks after it (the store,
// the metrics). Host and GPU measures feed its context on the way.
#pragma once
#include <cstdint>

#include "common/clock.h"
#include "detect/online.h"
#include "pipeline/sink.h"

namespace eacgm::detect {

class ScoringSink : public Sink {
public:
	explicit ScoringSink(OnlineDetector &d) : d_(d) {}
	Result<void> write(SpanBatch &b) override
	{
		if (b.kind != SpanBatch::calls)
			return {};
		auto keep = [&](std::optional<Anomaly> a) {
			if (a) {
				a->detected_ns = mono_ns();
				b.anomalies.push_back(std::move(*a));
			}
		};
		for (const Span &s : b.spans)
			keep(d_.observe(s));
		for (size_t i = 0; i < b.typed.size(); i++) // read typed: no Span made per call
			keep(d_.observe(b.typed, i));
		return {};
	}
	Result<void> measures(const std::vector<Metric> &metrics, const std::vector<Event> &events) override
	{
		for (auto &m : metrics)
			d_.observe(m);
		for (auto &e : events)
			d_.observe(e);
		return {};
	}
	// The detector learns from calls and measures alone; its refits end
	// with the pipeline (Pipeline::finish), not with the sinks.
	Result<void> process(const Process &) override { return {}; }
	Result<void> thread(const Thread &) override { return {}; }
	Result<void> drops(const std::vector<Drop> &) override { return {}; }
	Result<void> tick(uint64_t) override { return {}; }
	Result<void> finish() override { return {}; }
	OnlineDetector &detector() { return d_; }

private:
	OnlineDetector &d_;
};

} // namespace eacgm::detect
