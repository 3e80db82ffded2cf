// Turns a raw span record into a typed span (the return at its type, the
// bytes it moved) and that into a Span: the function's name, its arguments
// by name as text.
#pragma once
#include <map>

#include "common/model.h"
#include "eacgm/abi/events.h"
#include "pipeline/intern.h"
#include "pipeline/span.h"
#include "probe/spec.h"

namespace eacgm {

class Symbolizer;

// A raw span record as typed fields (pipeline/span.h): its return at its
// type, the bytes it moved by the spec's rule, its "symbol" arguments
// (kernel host stubs) resolved by sym (may be null: their address in hex)
// and interned in names. `specs` supplies the element sizes. No text is
// made but a symbol argument's name (or hex), looked up in names each call
// and kept there once.
TypedSpan decode_typed(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym,
		       Interner &names);

// One argument as a Span's args hold it: `v` its first slot, `next` the
// one after (a dim3's z, a tensor's second word).
nlohmann::json render_arg(const ArgSpec &a, uint64_t v, uint64_t next, const SpecSet &specs, const Interner &names,
			  TensorFormatter tensors);

// A return's name where the spec's return type is an enum; "" otherwise.
std::string ret_text(const ProbeSpec &spec, const SpecSet &specs, int64_t ret);

// A typed span as a Span: its function's layer and name, its arguments by
// name as text and numbers, its return's name (enums of `specs`).
Span render_span(const TypedSpan &t, const ProbeSpec &spec, const SpecSet &specs, const Interner &names,
		 TensorFormatter tensors = nullptr);

// Both: what the recorder stores today.
Span decode_span(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym,
		 Interner &names, TensorFormatter tensors = nullptr);

// "0x7f00dead" for pointers.
std::string hex(uint64_t v);

} // namespace eacgm
