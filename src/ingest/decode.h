// Turns a raw span record into a Span: the function's name, its arguments by
// name and type, its return value decoded, the bytes it moved.
#pragma once
#include <map>

#include "common/model.h"
#include "eacgm/abi/events.h"
#include "probe/spec.h"

namespace eacgm {

class Symbolizer;

// How a "tensor" argument's two words (EACGM_ARG_TENSOR_A/B, as span.bpf.c
// packs them) read as text: the torch layer's format_tensor ("float32[8,
// 32]"), which knows its dtypes. Null: the two words in hex.
using TensorFormatter = nlohmann::json (*)(uint64_t a, uint64_t b);

// sym resolves "symbol" arguments (kernel host stubs); may be null.
// `specs` supplies the enum names and element sizes.
Span decode_span(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym,
		 TensorFormatter tensors = nullptr);

// "0x7f00dead" for pointers.
std::string hex(uint64_t v);

} // namespace eacgm
