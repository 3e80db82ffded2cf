// Spans of a schema 4 recording read straight from its blocks, for eacgm's
// own readers (summary, detect, merge, the trace's collectives): each span's
// args are built from its function's argument list and slots, every string
// and stack parsed once, where the `spans` virtual table would render them
// as JSON text for the reader to parse again.
#pragma once
#include <functional>

#include "common/model.h"
#include "common/result.h"
#include "store/span_layout.h"

struct sqlite3;

namespace eacgm {

// take(span) for each span in id order whose function keep accepts (all,
// without keep). An error names what in the file is damaged.
Result<void> read_span_blocks(sqlite3 *db, const std::function<bool(const SpanFunction &)> &keep,
			      const std::function<void(Span &&)> &take);

} // namespace eacgm
