// SPDX-License-Identifier: Apache-2.0
#include <iostream>

#include "app/commands.h"
#include "common/fs.h"
#include "export/perfetto.h"
#include "export/pftrace.h"
#include "export/summary.h"
#include "store/store.h"

namespace eacgm {

namespace {

// A finished recording opened to be read span by span: what it holds
// besides its spans, and the summary's tally to feed them to.
struct Streamed {
	RecordingReader reader;
	Recording rec;
	SpanTally tally;
};

Result<Streamed> open_streamed(const std::string &db)
{
	auto reader = RecordingReader::open(db);
	if (!reader)
		return reader.error();
	auto rec = reader->read(false);
	if (!rec)
		return rec.error();
	SpanTally tally(*rec);
	return Streamed{std::move(*reader), std::move(*rec), std::move(tally)};
}

Result<std::string> summary_of(const std::string &db)
{
	auto s = open_streamed(db);
	if (!s)
		return s.error();
	if (auto r = s->reader.each_span(SpanOrder::as_recorded, [&](const Span &sp) { s->tally.add(sp); }); !r)
		return r.error();
	return format_summary(s->rec, s->tally);
}

} // namespace

// One pass over the spans, as the file holds them, feeds both: never the
// whole recording in memory. The collectives are read before it (their
// rounds across ranks mark the trace's spans).
Result<std::string> write_trace_and_summary(const std::string &db, const std::string &trace, uint64_t *spans)
{
	auto format = trace_format_of(trace);
	if (!format)
		return format.error();
	auto s = open_streamed(db);
	if (!s)
		return s.error();
	auto feed = [&](const SpanVisit &visit) {
		return s->reader.each_span(SpanOrder::by_thread, [&](const Span &sp) {
			s->tally.add(sp);
			visit(sp);
		});
	};
	auto collectives = [&](const SpanVisit &visit) {
		return s->reader.each_span_with_int_args(kCollectiveArgs, visit);
	};
	if (auto r = *format == TraceFormat::Json ? write_perfetto(s->rec, trace, feed, collectives)
						  : write_pftrace(s->rec, trace, feed, collectives);
	    !r)
		return r.error();
	if (spans)
		*spans = s->tally.spans();
	return format_summary(s->rec, s->tally);
}

int run_export(const std::string &db, const std::string &perfetto)
{
	if (auto f = trace_format_of(perfetto); !f)
		return fail(f.error().message, 2);
	if (auto w = check_writable(perfetto); !w)
		return fail(w.error().message);
	uint64_t spans = 0;
	if (auto r = write_trace_and_summary(db, perfetto, &spans); !r)
		return fail(r.error().message);
	std::cout << "wrote " << perfetto << " (" << spans << " spans); open it in ui.perfetto.dev\n";
	return 0;
}

int run_export_sqlite(const std::string &db, const std::string &out)
{
	if (auto w = check_writable(out); !w)
		return fail(w.error().message);
	if (auto r = write_flat_copy(db, out); !r)
		return fail(r.error().message);
	std::cout << "wrote " << out << " (a row per span: SELECT ... FROM spans with any SQLite)\n";
	return 0;
}

int run_summary(const std::string &db)
{
	auto text = summary_of(db);
	if (!text)
		return fail(text.error().message);
	std::cout << *text;
	return 0;
}

} // namespace eacgm
