// SPDX-License-Identifier: Apache-2.0
// The span records decode saw, kept to be replayed: `record --raw-dump F`
// writes them, bench_pipeline_cost --replay F times decode and store on
// them (the records of a real recording, not one record repeated).
//
// Format: the line "eacgm raw dump 1\n"; each record as the ring gave it
// (eacgm_span_event, its size fixed by events.h); the probes as a JSON text
// (what decode and rendering read of them: layer, function, return type,
// arguments, the bytes rule; the enums and element sizes), written at the
// end since probes are added as libraries load; that text's length (u32,
// little-endian) and the line "eacgm raw end\n". Not a recording: no
// processes, stacks or metrics, and its spec ids mean the probes in it.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "eacgm/abi/events.h"
#include "probe/spec.h"

namespace eacgm {

class RawDumpWriter {
public:
	// Creates `path` (replacing it).
	static Result<RawDumpWriter> create(const std::string &path);
	// Buffered: a write costs a copy; the first failure is kept for close().
	void span(const eacgm_span_event &e);
	// Ends the dump with the probes the records' spec ids count in.
	Result<void> close(const SpecSet &specs);

private:
	struct Closer {
		void operator()(FILE *f) const;
	};
	std::unique_ptr<FILE, Closer> f_;
	std::string path_;
	bool failed_ = false;
};

struct RawDump {
	SpecSet specs; // the probes the records' spec ids count in
	std::vector<eacgm_span_event> spans;
};

// Reads a dump whole; a damaged or truncated one is an error that says where.
Result<RawDump> read_raw_dump(const std::string &path);

} // namespace eacgm
