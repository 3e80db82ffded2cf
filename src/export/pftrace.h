// SPDX-License-Identifier: Apache-2.0
// A recording's trace in Perfetto's own protobuf format (.pftrace), which
// ui.perfetto.dev and trace_processor open: the same content as the JSON
// trace (export/perfetto.h) at a fraction of its size, so that a long run's
// trace still opens.
//
// Layout (docs/trace.md; the fields used are in pftrace.cpp):
//   - sequence 1: a track per process (its title as the JSON names it), per
//     thread, and per counter;
//   - a sequence per thread: its spans as slice begins and ends on a track
//     per layer under the thread's (a layer's calls nest; two layers'
//     calls need not: a sampled Python function and the torch call it made
//     may overlap at a sampling edge), with names, categories, argument
//     names and string values interned, and timestamps as deltas on a clock
//     of the sequence's own (incremental); a collective round's spans are
//     linked by a flow in the order they arrived, a call that ran work
//     another issued by a flow from an instant at the issue;
//   - a sequence for the metrics (counter tracks), one for events and
//     anomalies (instants), one for the issue instants.
// Each sequence clears its incremental state in its first packet and
// defines every interned id before the packet that uses it.
#pragma once
#include <string>

#include "common/model.h"
#include "common/result.h"
#include "export/perfetto.h"

namespace eacgm {

// Writes the trace to path (whole or not at all); spans and collectives as
// write_perfetto takes them.
Result<void> write_pftrace(const Recording &rec, const std::string &path, const SpanFeed &spans,
			   const SpanFeed &collectives = {});

// The trace format a path asks for by its extension: ".json" or ".pftrace"
// (".perfetto-trace", ".pb" too); anything else is an error that says so.
enum class TraceFormat { Json, Proto };
Result<TraceFormat> trace_format_of(const std::string &path);

} // namespace eacgm
