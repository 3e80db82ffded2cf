// A span as decode makes it (decode_typed, ingest/decode.h): fixed, typed
// fields, no string and no JSON. The first step of issue 37's span path:
// today the recorder renders each one into a Span (common/model.h) at once;
// the sinks are to take these instead, and text (names, hex, enums,
// tensors) to be made only at the edges that show it (render_span).
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>

#include "eacgm/abi/events.h"

namespace eacgm {

struct TypedSpan {
	uint64_t start_ns = 0;
	uint64_t dur_ns = 0;
	int64_t ret = 0;      // as the spec's return type reads it (an i32 or enum sign-extended; void: 0)
	uint64_t bytes = 0;   // what the call moved or allocated, by the spec's rule
	uint64_t runq_ns = 0; // how long the thread waited to run during the call; 0: it did not
	uint32_t pid = 0;
	uint32_t tid = 0;
	uint32_t depth = 0;   // open spans below it on its thread when it began
	uint32_t spec_id = 0; // its probe's spec, in the recording's SpecSet
	// The argument slots as the probe read them (a spec argument takes
	// arg_width() of them, in its order), except a "symbol" argument's
	// slot, which holds the StrId (pipeline/intern.h) of the name it
	// resolved to, or of its address in hex where it resolved to none.
	std::array<uint64_t, EACGM_MAX_ARGS> args{};
};
// Copied by value through batches and rings of its own; its layout is its
// fields' (no padding to carry stale bytes into a store).
static_assert(std::is_trivially_copyable_v<TypedSpan>);
static_assert(sizeof(TypedSpan) == 5 * 8 + 4 * 4 + 8 * EACGM_MAX_ARGS);

} // namespace eacgm
