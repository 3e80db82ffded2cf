// SPDX-License-Identifier: Apache-2.0
// A span as decode makes it (decode_typed, pipeline/decode.h): fixed, typed
// fields, no string and no JSON. Every sink reads the calls no joiner
// changed in this form (SpanBatch::typed, pipeline/sink.h); text (names,
// hex, enums, tensors) is made only at the edges that show it
// (render_span). A joiner's calls still reach the sinks as Spans
// (common/model.h).
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/model.h"
#include "eacgm/abi/events.h"

namespace eacgm {

struct TypedSpan {
	uint64_t start_ns = 0;
	uint64_t dur_ns = 0;
	int64_t ret = 0;      // as the spec's return type reads it (an i32 or enum sign-extended; void: 0)
	uint64_t bytes = 0;   // what the call moved or allocated, by the spec's rule
	uint64_t runq_ns = 0; // how long the thread waited to run during the call; 0: it did not
	double weight = 1.0;  // the calls it stands for (kWeightArg; --overhead-budget), 1: itself
	uint32_t pid = 0;
	uint32_t tid = 0;
	uint32_t depth = 0;   // open spans below it on its thread when it began
	uint32_t spec_id = 0; // its probe's spec, in the recording's SpecSet
	// How the call left where it did not return (a C++ exception unwound
	// it, pthread_exit, longjmp: EACGM_SPAN_LEFT): the StrId of what its
	// span says of it in place of a return ("threw c10::Error"), ret then
	// 0; 0: it returned.
	uint64_t left = 0;
	// The argument slots as the probe read them (a spec argument takes
	// arg_width() of them, in its order), except a "symbol" argument's
	// slot, which holds the StrId (pipeline/intern.h) of the name it
	// resolved to, or of its address in hex where it resolved to none.
	std::array<uint64_t, EACGM_MAX_ARGS> args{};
};
// Copied by value through batches and rings of its own; its layout is its
// fields' (no padding to carry stale bytes into a store).
static_assert(std::is_trivially_copyable_v<TypedSpan>);
static_assert(sizeof(TypedSpan) == 7 * 8 + 4 * 4 + 8 * EACGM_MAX_ARGS);

struct SpecSet;
class Interner;

// How a "tensor" argument's two words (EACGM_ARG_TENSOR_A/B, as span.bpf.c
// packs them) read as text: the torch layer's format_tensor ("float32[8,
// 32]"), which knows its dtypes. Null: the two words in hex.
using TensorFormatter = nlohmann::json (*)(uint64_t a, uint64_t b);

// Typed spans on their way to the sinks, with what giving them names and
// text needs: the probes their spec_id counts in, the names their symbol
// slots hold, how a tensor reads. The store keeps them without a Span or a
// JSON object per span (StoreWriter::add_spans).
struct TypedSpans {
	const SpecSet *specs = nullptr;
	const Interner *names = nullptr;
	TensorFormatter tensors = nullptr;
	std::vector<TypedSpan> spans;
	std::vector<PyStack> stacks; // spans[i]'s Python stack when it began (empty: outside Python)

	size_t size() const { return spans.size(); }
	bool empty() const { return spans.empty(); }
	void push_back(const TypedSpan &t, PyStack stack = {})
	{
		spans.push_back(t);
		stacks.push_back(std::move(stack));
	}
	void clear() { spans.clear(), stacks.clear(); }
};

// spans[i] as a Span (render_span, with its stack): for the edges that show
// a call, and the sinks that read Spans (src/pipeline/batch.cpp).
Span span_at(const TypedSpans &t, size_t i);

} // namespace eacgm
