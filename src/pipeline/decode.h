// SPDX-License-Identifier: Apache-2.0
// Turns a raw span record into a typed span (the return at its type, the
// bytes it moved) and that into a Span: the function's name, its arguments
// by name as text.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "common/model.h"
#include "eacgm/abi/events.h"
#include "pipeline/intern.h"
#include "pipeline/span.h"
#include "probe/spec.h"

namespace eacgm {

class Symbolizer;

// What decode reads of a probe, worked out once per probe (decode_plan):
// its return's width, which slot holds the bytes it moved, where its
// "symbol" arguments are. With it, decode reads no ArgSpec per call (the
// probes' argument lists are strings and vectors: a cache line or more
// each, per argument).
struct DecodePlan {
	uint8_t ret_width = 8;  // bytes of the return register it holds: 0 (void), 4 (i32, a C enum) or 8
	int8_t bytes_slot = -1; // the first "bytes" argument's slot; -1: none
	bool general = false;   // a bytes or alias rule reads arguments by name: decode walks the spec
	uint8_t n_symbols = 0;  // "symbol" arguments, their slots in symbols
	uint8_t symbols[EACGM_MAX_ARGS] = {};
};
DecodePlan decode_plan(const ProbeSpec &spec);

// A raw span record as typed fields (pipeline/span.h): its return at its
// type, the bytes it moved by the spec's rule, its "symbol" arguments
// (kernel host stubs) resolved by sym (may be null: their address in hex)
// and interned in names. `specs` supplies the element sizes. No text is
// made but a symbol argument's name (or hex), looked up in names each call
// and kept there once.
TypedSpan decode_typed(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym,
		       Interner &names);
// The same, with the probe's plan made beforehand (the record loop keeps one
// per probe).
TypedSpan decode_typed(const eacgm_span_event &e, const ProbeSpec &spec, const DecodePlan &plan, const SpecSet &specs,
		       Symbolizer *sym, Interner &names);

// One argument as a Span's args hold it: `v` its first slot, `next` the
// one after (a dim3's z, a tensor's second word).
nlohmann::json render_arg(const ArgSpec &a, uint64_t v, uint64_t next, const SpecSet &specs, const Interner &names,
			  TensorFormatter tensors);

// What a span of a call that left without returning says in place of its
// return's name (span flags EACGM_SPAN_LEFT_*): "threw c10::Error" (the
// symbol of the exception's std::type_info, as the process maps it:
// "typeinfo for c10::Error"; "threw an exception" where it names none),
// "unwound by pthread_exit or pthread_cancel", "left by longjmp".
std::string left_text(uint16_t flags, const std::optional<std::string> &type_info);

// An EACGM_SPEC_EXCEPTION_TYPE record: its type's name given to sym for the
// type_info's address (what decode_typed asks it of a span left by the
// exception), as the symbol of that object would read.
void name_exception_type(const eacgm_span_event &e, Symbolizer &sym);

// A return's name where the spec's return type is an enum; "" otherwise.
std::string ret_text(const ProbeSpec &spec, const SpecSet &specs, int64_t ret);

// A typed span as a Span: its function's layer and name, its arguments by
// name as text and numbers, its return's name (enums of `specs`).
Span render_span(const TypedSpan &t, const ProbeSpec &spec, const SpecSet &specs, const Interner &names,
		 TensorFormatter tensors = nullptr);

// Both: what the record loop stores today.
Span decode_span(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym,
		 Interner &names, TensorFormatter tensors = nullptr);

} // namespace eacgm
