// Chrome trace-event JSON, the format ui.perfetto.dev and chrome://tracing open.
//
// Timestamps: ts = start_ns / 1000.0 and dur = dur_ns / 1000.0, microseconds
// on the CLOCK_MONOTONIC timeline the spans were recorded on (not Unix time),
// so traces from several recordings on one boot line up. The double keeps
// every nanosecond while the clock is below 2^43 us (about 100 days of
// uptime); otherData.wall_offset_ns converts to Unix time.
#pragma once
#include <functional>
#include <string>

#include "common/model.h"
#include "common/result.h"

namespace eacgm {

// {"traceEvents":[...], "displayTimeUnit":"ns", "otherData":{meta...}}:
// process_name/thread_name metadata events, then one complete ("X") event
// per span, per thread in (start asc, dur desc) order so parents precede
// the children they contain.
std::string perfetto_json(const Recording &rec);

// Writes perfetto_json(rec) to path, event by event (the document is never
// held whole); the file appears whole or not at all.
Result<void> write_perfetto(const Recording &rec, const std::string &path);

// One span's complete ("X") event, as the trace holds it: args are the
// span's args with "ret" (its decoded name, or the raw value), "bytes" (when
// not 0) and "python" (its stack) set; ts and dur in microseconds.
std::string span_event_text(const Span &s);

// Hands each span to the visitor in SpanOrder::by_thread: a recording's
// RecordingReader::each_span, so that its spans are never held whole.
using SpanFeed = std::function<Result<void>(const SpanVisit &)>;
// The same document with the spans from spans (rec.spans unused): the
// same bytes as from the spans in memory. An error from the feed leaves
// nothing at path.
Result<void> write_perfetto(const Recording &rec, const std::string &path, const SpanFeed &spans);

} // namespace eacgm
