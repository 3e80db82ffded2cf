// SPDX-License-Identifier: Apache-2.0
// Chrome trace-event JSON, the format ui.perfetto.dev and chrome://tracing open.
//
// Timestamps: ts = start_ns / 1000.0 and dur = dur_ns / 1000.0, microseconds
// on the CLOCK_MONOTONIC timeline the spans were recorded on (not Unix time),
// so traces from several recordings on one boot line up. The double keeps
// every nanosecond while the clock is below 2^43 us (about 100 days of
// uptime); otherData.wall_offset_ns converts to Unix time.
#pragma once
#include <functional>
#include <map>
#include <tuple>
#include <vector>
#include <string>

#include "common/model.h"
#include "common/result.h"
#include "pipeline/collectives.h"

namespace eacgm {

// {"traceEvents":[...], "displayTimeUnit":"ns", "otherData":{meta...}}:
// process_name/thread_name metadata events, then one complete ("X") event
// per span, per thread in (start asc, dur desc) order so parents precede
// the children they contain.
//
// Collectives across ranks (pipeline/collectives.h): the spans of one round
// carry args arrival_skew_ms (the latest start less the earliest, in ms)
// and last_rank (the rank that arrived last; ranks_seen too when not every
// rank was seen), and are linked in the order they arrived by a flow
// (Perfetto's flow v2 on complete events: bind_id, flow_out on the first,
// flow_in and flow_out on the next, flow_in on the last). A process is
// named "comm (pid)", then its host where the recording was merged from
// several (meta process_origins, with the pid it had there), then its rank
// in the largest group it took part in: "python3 (4242) node1 rank 1".
// A call that ran work another issued (args issued_ns and issued_tid,
// pipeline/issues.h) is linked to the issuing call by a flow of its own (v1
// "s"/"f" events, cat "issue").
std::string perfetto_json(const Recording &rec);

// Writes perfetto_json(rec) to path, event by event (the document is never
// held whole); the file appears whole or not at all.
Result<void> write_perfetto(const Recording &rec, const std::string &path);

// One span's complete ("X") event, as the trace holds it: args are the
// span's args with "ret" (its decoded name, or the raw value), "bytes" (when
// not 0) and "python" (its stack) set; ts and dur in microseconds.
std::string span_event_text(const Span &s);

// Per collective span, what the trace adds to it: its round's flow and
// arrival skew; per process its rank.
class CollectiveMarks {
public:
	struct Mark {
		uint64_t flow = 0;            // the round's flow id (bind_id), from 1
		bool in = false, out = false; // flow_in, flow_out
		uint64_t skew_ns = 0;
		uint32_t last_rank = 0;
		uint32_t seen = 0, nranks = 0;
	};
	CollectiveMarks() = default;
	// rounds in any order: they are numbered by first arrival, then key,
	// so that the same rounds give the same trace whatever the order.
	explicit CollectiveMarks(std::vector<Round> rounds);
	// The mark of a collective span of one of the rounds; null otherwise.
	const Mark *find(const Span &s) const;
	// A process's rank in the largest group it took part in (the lowest of
	// two); -1 where it took part in none.
	int64_t rank_of(uint32_t pid) const;

private:
	std::map<std::tuple<uint32_t, uint32_t, uint64_t>, Mark> marks_; // by pid, tid, start_ns
	std::map<uint32_t, std::pair<uint32_t, uint32_t>> ranks_;        // pid -> nranks, rank
};

// "python3 (4242) node1 rank 1": the pid a merged process had on its host
// (meta process_origins, parsed), then its host and its rank where known.
std::string process_title(const Process &p, const nlohmann::json &origins, const CollectiveMarks &marks);

// A span's event with its collective mark (see above) where it has one.
std::string span_event_text(const Span &s, const CollectiveMarks::Mark *mark);

// Hands each span to the visitor in SpanOrder::by_thread: a recording's
// RecordingReader::each_span, so that its spans are never held whole.
using SpanFeed = std::function<Result<void>(const SpanVisit &)>;
// The same document with the spans from spans (rec.spans unused): the
// same bytes as from the spans in memory, where collectives hands over
// the collective spans among them (in any order: it is read first, for
// their rounds; RecordingReader::each_span_with_int_args(kCollectiveArgs));
// without it, collectives are not marked. An error from a feed leaves
// nothing at path.
Result<void> write_perfetto(const Recording &rec, const std::string &path, const SpanFeed &spans,
			    const SpanFeed &collectives = {});

// The marks of the collective spans a feed hands over, in any order (their
// rounds matched across ranks); none without a feed. Both trace formats'.
Result<CollectiveMarks> collective_marks(const SpanFeed &collectives);

} // namespace eacgm
