// SPDX-License-Identifier: Apache-2.0
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

// Whether a span of this thread, starting then, is wanted: asked before
// anything else of it is read.
using RowKeep = std::function<bool(uint32_t pid, uint32_t tid, uint64_t start_ns)>;

// Whether a block whose spans start in [min_start, max_start] may hold a
// wanted span: asked before the block is decoded.
using BlockKeep = std::function<bool(uint64_t min_start, uint64_t max_start)>;

// take(span) for each span in id order whose block (blocks), row (rows) and
// function (keep) are wanted (all, where they are null). An error names what
// in the file is damaged.
Result<void> read_span_blocks(sqlite3 *db, const std::function<bool(const SpanFunction &)> &keep,
			      const std::function<void(Span &&)> &take, const RowKeep &rows = nullptr,
			      const BlockKeep &blocks = nullptr);

// take(span) for each span by thread (pid, tid), then start, longer first,
// shallower first, then id: the order a trace nests spans in
// (SpanOrder::by_thread), in memory bounded by about `limit` spans at a
// time: where more are recorded, each pass over the blocks takes the spans
// of some threads, or of a thread's start times, at a time, and decodes only
// the blocks whose start times meet them. 50,000 spans (as Spans, with their
// args, about 30 MB): a GPT recording of 217,000 spans is exported at 56 MB
// of RSS where 500,000 at a time took 154 MB, and no slower.
Result<void> read_spans_by_thread(sqlite3 *db, const std::function<void(Span &&)> &take, size_t limit = 50'000);

} // namespace eacgm
