// SPDX-License-Identifier: Apache-2.0
// The ClickHouse sink: what the pipeline makes, as rows of the tables of
// export/clickhouse.h, encoded on the pipeline's thread and handed to the
// shipper about once a second.
//
// What is shipped is the operator's choice (docs/clickhouse.md):
// always the small rows that answer the cluster's questions (collective
// rounds, per-function aggregates every interval, anomalies with their
// causes, events such as hangs, host and GPU metrics, process info), and
// spans, every one ("all"), none, or only those of the seconds around an
// anomaly or a hang ("around"): the rows of each second wait here for
// `around` before they are let go, and an anomaly or a hang ships those
// still waiting and the ones made for `around` after it.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "export/clickhouse.h"
#include "pipeline/collectives.h"
#include "pipeline/sink.h"

namespace eacgm {

class ClickHouseSink : public Sink {
public:
	struct Identity {
		std::string host;           // the node's name in every row
		std::string job;            // where a process's launcher gave none; "": none known
		int64_t clock_shift_ns = 0; // added to every wall time (tests: a node whose clock is off)
	};
	enum class Spans { all, around, none };
	struct Options {
		Spans spans = Spans::all;
		uint64_t around_ns = 2'000'000'000;     // Spans::around: this long before and after
		uint64_t aggregate_ns = 10'000'000'000; // one aggregates row per function and process this often
	};
	ClickHouseSink(ClickHouseShipper &shipper, Identity id, Options o);
	// The configuration's word for it: "all", "around", "none".
	static std::optional<Spans> spans_of(const std::string &word);
	Result<void> write(SpanBatch &b) override;
	// Host and GPU metrics as rows of `metrics`; events (hangs and their
	// end, XID errors, budget changes) as rows of `events`.
	Result<void> measures(const std::vector<Metric> &metrics, const std::vector<Event> &events) override;
	// Each process's job and rank, from its launcher's environment; a
	// `processes` row each time it is told (its start, its exit).
	Result<void> process(const Process &p) override;
	// A thread is a row of no table here; the losses are the agent's
	// metrics and the recording's.
	Result<void> thread(const Thread &) override { return {}; }
	Result<void> drops(const std::vector<Drop> &) override { return {}; }
	// About once a second, batch or not: rows a second old go (an idle
	// node's last rows must not wait for its next span).
	Result<void> tick(uint64_t now_ns) override;
	// Everything gathered goes to the shipper now (at the end): the spans
	// held for `around` only where an anomaly or a hang asked for them.
	Result<void> finish() override;
	// Spans::around: span rows held and let go, no anomaly or hang near them.
	uint64_t spans_let_go() const { return let_go_; }

private:
	// A process's job, and its rank: its launcher's, else the one its
	// collectives said (mp.spawn sets no RANK), else -1.
	struct Who {
		std::string job;
		int64_t rank = -1;
		uint64_t ended_ns = 0; // forgotten 10 s after its exit (late spans still find it)
	};
	// Rows made since the last flush, per table.
	struct Pending {
		RowBinary rows;
		uint64_t count = 0;
	};
	// A second's span rows held for Spans::around, with their latest start
	// (CLOCK_MONOTONIC): they are let go once no window can reach it.
	struct Held {
		Pending rows;
		uint64_t last_ns = 0;
	};
	// One aggregates row in the making: a function's calls in one process.
	struct Aggregate {
		uint32_t pid = 0;
		std::string layer, name;
		double calls = 0, total_ns = 0, bytes = 0;
		uint64_t max_ns = 0;
	};
	struct Call {
		uint32_t pid, tid;
		std::string_view layer, name;
		uint64_t start_ns, dur_ns;
		int64_t seq, rank;
		uint64_t bytes;
		int64_t ret;
		double weight;
	};
	void add_call(const Call &c);
	void add_typed(const TypedSpans &ts);
	void add_span_row(Pending &p, const Call &c, const Who &w);
	void call_columns(RowBinary &r, int64_t rank, uint32_t pid, uint32_t tid, std::string_view layer,
			  std::string_view name, uint64_t start_ns, uint64_t dur_ns) const;
	void add_anomaly(const Anomaly &a);
	void add_event(const Event &e);
	void add_metric(const Metric &m);
	void aggregate(const Call &c);
	void ship_aggregates(uint64_t now_ns);
	void ship_spans(uint64_t now_ns, bool end);
	void ship(uint64_t now_ns, bool end); // every table's rows made so far to the shipper
	void ship_due(uint64_t now_ns);       // ship() when the last was kFlushEveryNs ago
	void asked_around(uint64_t at_ns);    // an anomaly or a hang at this time: its spans go
	void let_go_front();                  // the oldest held second, never asked for
	Pending &rows_of(ClickHouseTable t) { return pending_[size_t(t)]; }
	// The columns every row begins with (day, host, job), and its count.
	void begin_row(Pending &p, uint64_t wall_ns, const std::string &job);
	void end_row(RowBinary &r); // (agent, row)
	uint64_t wall(uint64_t mono_ns) const { return uint64_t(int64_t(mono_ns) + wall_minus_mono_); }
	Who &who(uint32_t pid);
	void forget_ended(uint64_t now_ns);

	ClickHouseShipper &shipper_;
	Identity id_;
	Options o_;
	uint64_t agent_ = 0;          // this run's id: (agent, row) is each row's key
	uint64_t row_ = 0;            // rows made so far
	int64_t wall_minus_mono_ = 0; // CLOCK_MONOTONIC times to the wall clock, for cross-node rows
	std::array<Pending, kClickHouseTableCount> pending_;
	uint64_t spans_first_ns_ = UINT64_MAX, spans_last_ns_ = 0; // pending spans' starts
	std::deque<Held> held_;                                    // Spans::around
	size_t held_bytes_ = 0;
	uint64_t ship_until_ns_ = 0; // Spans::around: spans starting before this go
	uint64_t let_go_ = 0;
	std::unordered_map<std::string, Aggregate> aggregates_;
	std::string key_; // aggregates_' key, reused
	uint64_t interval_ns_ = 0, last_flush_ns_ = 0;
	TypedCollectives collectives_;
	std::unordered_map<uint32_t, Who> who_;
};

} // namespace eacgm
