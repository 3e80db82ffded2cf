// SPDX-License-Identifier: Apache-2.0
// Where the pipeline's output goes. The record loop makes spans,
// process and thread records and loss counts; the collectors make metrics
// and events; each goes to every sink of a chain, in order: the online
// detector first (it adds the anomalies it finds to the batch), then the
// store, the Prometheus registry, ... `record` and `serve` differ only in
// the chain they build.
#pragma once
#include <vector>

#include "common/model.h"
#include "common/result.h"
#include "pipeline/span.h"

namespace eacgm {

// Spans made since the last batch and the anomalies found among them.
struct SpanBatch {
	// Traced calls (a probe's entry and return) are scored online; Python
	// function spans made from stack samples are not (their duration is an
	// estimate from sample counts, not a measurement).
	enum Kind { calls, sampled } kind = calls;
	std::vector<Span> spans;
	std::vector<Anomaly> anomalies; // filled by the sinks that score
	// Calls kept typed (pipeline/span.h): those no joiner changed. Every
	// sink reads them as they are (the store, the detector, the metrics,
	// the hang watch), after `spans`; each function's calls keep their
	// order, since a probe's calls go one way or the other. span_at makes
	// one a Span where a sink must show it.
	TypedSpans typed;
};

// A sink (the store, the metrics, ClickHouse, the detector, the hang
// watch), driven the same way by `record` and `serve`: the record loop
// (pipeline/record_loop.h) makes every call below but the measures, which the
// collectors' loop gives (app/pipeline.cpp). Each is pure: a sink says what
// it does with each one, if only `return {};`, so a call added here is a
// compile error in every sink until it says.
class Sink {
public:
	virtual ~Sink() = default;
	// A batch of calls, as read. A sink earlier in the chain may add to it
	// (anomalies).
	virtual Result<void> write(SpanBatch &batch) = 0;
	// Host and GPU samples and instants: context for the spans near them.
	virtual Result<void> measures(const std::vector<Metric> &, const std::vector<Event> &) = 0;
	// A process or thread as known now; again when it has changed (exited).
	virtual Result<void> process(const Process &) = 0;
	virtual Result<void> thread(const Thread &) = 0;
	// Records lost or not recorded so far, all of them (replaces the last):
	// serve's once a second, record's at the end.
	virtual Result<void> drops(const std::vector<Drop> &) = 0;
	// About once a second (CLOCK_MONOTONIC), whether anything came or not:
	// what a sink does by time (rows that waited long enough shipped).
	virtual Result<void> tick(uint64_t now_ns) = 0;
	// Once, after everything else: all that was read has been written, and
	// what the sink still holds goes now.
	virtual Result<void> finish() = 0;
};

// Sinks called in order; the first error stops the call there.
class SinkChain : public Sink {
public:
	SinkChain() = default;
	SinkChain(std::vector<Sink *> sinks) : sinks_(std::move(sinks)) {}
	void add(Sink *s) { sinks_.push_back(s); }
	Result<void> write(SpanBatch &b) override
	{
		return each([&](Sink &s) { return s.write(b); });
	}
	Result<void> measures(const std::vector<Metric> &m, const std::vector<Event> &e) override
	{
		return each([&](Sink &s) { return s.measures(m, e); });
	}
	Result<void> process(const Process &p) override
	{
		return each([&](Sink &s) { return s.process(p); });
	}
	Result<void> thread(const Thread &t) override
	{
		return each([&](Sink &s) { return s.thread(t); });
	}
	Result<void> drops(const std::vector<Drop> &d) override
	{
		return each([&](Sink &s) { return s.drops(d); });
	}
	Result<void> tick(uint64_t now_ns) override
	{
		return each([&](Sink &s) { return s.tick(now_ns); });
	}
	Result<void> finish() override
	{
		return each([&](Sink &s) { return s.finish(); });
	}

private:
	template <class F>
	Result<void> each(F f)
	{
		for (Sink *s : sinks_)
			if (auto r = f(*s); !r)
				return r;
		return {};
	}
	std::vector<Sink *> sinks_;
};

} // namespace eacgm
