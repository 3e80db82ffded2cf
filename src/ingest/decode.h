// Turns a raw span record into a Span: the function's name, its arguments by
// name and type, its return value decoded, the bytes it moved.
#pragma once
#include <map>

#include "common/model.h"
#include "eacgm/abi/events.h"
#include "probe/spec.h"

namespace eacgm {

class Symbolizer;

// sym resolves "symbol" arguments (kernel host stubs); may be null.
// `specs` supplies the enum names and element sizes.
Span decode_span(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym);

// "0x7f00dead" for pointers.
std::string hex(uint64_t v);

} // namespace eacgm
