#include <iostream>

#include "app/commands.h"
#include "common/fs.h"
#include "export/perfetto.h"
#include "export/summary.h"
#include "store/store.h"

namespace eacgm {

// One pass over the spans, as the file holds them, feeds both: never the
// whole recording in memory.
Result<std::string> write_trace_and_summary(const std::string &db, const std::string &trace, uint64_t *spans)
{
	auto reader = RecordingReader::open(db);
	if (!reader)
		return reader.error();
	auto rec = reader->read(false);
	if (!rec)
		return rec.error();
	SpanTally tally(*rec);
	auto feed = [&](const SpanVisit &visit) {
		return reader->each_span(SpanOrder::by_thread, [&](const Span &s) {
			tally.add(s);
			visit(s);
		});
	};
	if (auto r = write_perfetto(*rec, trace, feed); !r)
		return r.error();
	if (spans)
		*spans = tally.spans();
	return format_summary(*rec, tally);
}

int run_export(const std::string &db, const std::string &perfetto)
{
	if (auto w = check_writable(perfetto); !w) {
		std::cerr << "eacgm: " << w.error().message << "\n";
		return 1;
	}
	uint64_t spans = 0;
	if (auto r = write_trace_and_summary(db, perfetto, &spans); !r) {
		std::cerr << "eacgm: " << r.error().message << "\n";
		return 1;
	}
	std::cout << "wrote " << perfetto << " (" << spans << " spans); open it in ui.perfetto.dev\n";
	return 0;
}

int run_summary(const std::string &db)
{
	auto reader = RecordingReader::open(db);
	if (!reader) {
		std::cerr << "eacgm: " << reader.error().message << "\n";
		return 1;
	}
	auto rec = reader->read(false);
	if (!rec) {
		std::cerr << "eacgm: " << rec.error().message << "\n";
		return 1;
	}
	SpanTally tally(*rec);
	if (auto r = reader->each_span(SpanOrder::as_recorded, [&](const Span &s) { tally.add(s); }); !r) {
		std::cerr << "eacgm: " << r.error().message << "\n";
		return 1;
	}
	std::cout << format_summary(*rec, tally);
	return 0;
}

} // namespace eacgm
