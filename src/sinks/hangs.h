// SPDX-License-Identifier: Apache-2.0
// Hangs, seen while they last (--hang-after): a call whose spec says it
// waits on other processes (a collective, the caller's wait on one, a
// communicator's set-up) that has been in flight longer than the limit. The
// calls in flight are read from the span engine's entry state, not guessed
// from a missing return; each is reported once, as an event ("hang": the
// store's events, the metrics) and a line for the user, and once more when it
// returns ("hang_over").
//
// A collective carries its process group's rank, size and sequence number
// (args rank, nranks, seq: the gloo layer's, the same seq on every rank for
// the same collective). The watch keeps, per group, the last sequence number
// each rank completed (the spans it is handed as a sink) and sees which
// ranks are inside which collective now; the ranks of the hung collective's
// group that have not entered its sequence number are its missing_ranks.
// A group is told apart by its layer and size: two groups of one size in one
// job (a subgroup of the same size as the world) are one to the watch.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "layers/collector.h"
#include "pipeline/collectives.h"
#include "pipeline/record_loop.h"
#include "pipeline/sink.h"

namespace eacgm {

class HangWatch : public Sink, public Collector {
public:
	explicit HangWatch(uint64_t after_ns) : after_ns_(after_ns) {}
	// Where the calls in flight are read from (set once it exists).
	void attach(RecordLoop &r) { loop_ = &r; }

	// Sink: every finished call (the ranks' progress). It looks at the
	// calls in flight as a collector (below), at its own interval, not at
	// the sinks' tick.
	Result<void> write(SpanBatch &b) override;
	Result<void> process(const Process &p) override;
	Result<void> measures(const std::vector<Metric> &, const std::vector<Event> &) override { return {}; }
	Result<void> thread(const Thread &) override { return {}; }
	Result<void> drops(const std::vector<Drop> &) override { return {}; }
	Result<void> tick(uint64_t) override { return {}; }
	Result<void> finish() override { return {}; }

	// Collector: looks at the calls in flight when due.
	const char *layer() const override { return "hang"; }
	void collect(uint64_t now_ns, const std::set<uint32_t> &traced, std::vector<Metric> &metrics,
		     std::vector<Event> &events) override;
	uint64_t next_due_ns() const override { return due_ns_; }
	// The last look comes at once: hangs that ended with the recording are
	// told over.
	void stop() override { due_ns_ = 0; }
	std::vector<std::string> take_warnings() override { return std::exchange(lines_, {}); }

	// One look at the calls in flight at now_ns (the work of collect(),
	// apart for tests): appends the events and the user's lines.
	void check(uint64_t now_ns, const std::vector<RecordLoop::OpenSpan> &open, std::vector<Event> &events);
	// How often collect() looks: a quarter of the limit, within 0.1 to 1 s,
	// so a hang is told at most a second or so past the limit.
	uint64_t interval_ns() const;

private:
	using Group = std::pair<std::string, int64_t>;            // layer, nranks
	using CallKey = std::tuple<uint32_t, uint32_t, uint64_t>; // pid, tid, start_ns
	// The last sequence number each rank of a group entered or completed.
	using Progress = std::map<Group, std::map<int64_t, int64_t>>;
	// c: the call taken apart as a collective, when it is one.
	void report(uint64_t now_ns, const Span &s, const std::optional<CollectiveSpan> &c, const Progress &entered,
		    const PyStack &waiting_stack, std::vector<Event> &events);
	// The other ranks of the group that have not entered seq (seen in the
	// recording), and those the recording has not seen at all.
	std::pair<std::vector<int64_t>, std::vector<int64_t>> ranks_behind(const Group &group, int64_t rank,
									   int64_t seq, const Progress &entered) const;
	void report_over(uint64_t now_ns, const std::vector<RecordLoop::OpenSpan> &open, std::vector<Event> &events);
	// A finished collective: its rank's progress.
	void completed(const CollectiveSpan &c);

	uint64_t after_ns_;
	uint64_t due_ns_ = 0;
	RecordLoop *loop_ = nullptr;
	Progress completed_;
	TypedCollectives typed_;
	// A process's rank in its group, from its collectives: for its waits,
	// which carry none.
	std::map<uint32_t, std::pair<Group, int64_t>> pid_rank_;
	std::map<CallKey, Span> reported_; // as first reported
	std::vector<std::string> lines_;
};

} // namespace eacgm
