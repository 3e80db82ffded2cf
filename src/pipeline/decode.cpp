// SPDX-License-Identifier: Apache-2.0
#include "pipeline/decode.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <optional>

#include "common/text.h"
#include "probe/elf_symbols.h"
#include "probe/symbolizer.h"

namespace eacgm {

static std::string enum_name(const std::map<std::string, EnumTable> &enums, const std::string &name, int64_t v)
{
	auto t = enums.find(name);
	if (t != enums.end()) {
		auto it = t->second.find(v);
		if (it != t->second.end())
			return it->second;
	}
	return name + "(" + std::to_string(v) + ")";
}

// An enum field at its width: the 8 bytes read hold its neighbours too.
static int64_t enum_value(const ArgSpec &a, uint64_t v)
{
	switch (a.size) {
	case 1: return uint8_t(v);
	case 2: return uint16_t(v);
	case 8: return int64_t(v);
	default: return int32_t(v); // a C enum
	}
}

// The spec's rule for the bytes a call moved: count x the element's size
// (an element type without a known size gives 0). `raw` holds each
// argument's first slot, by its place in spec.args.
static uint64_t bytes_by_rule(const ProbeSpec &spec, const SpecSet &specs,
			      const std::array<uint64_t, EACGM_MAX_ARGS> &raw)
{
	// The last argument of that name, as a map by name would keep.
	auto value_of = [&](const std::string &name, const ArgSpec **arg) -> uint64_t {
		uint64_t v = 0;
		for (size_t i = 0; i < spec.args.size(); i++)
			if (spec.args[i].name == name) {
				v = i < raw.size() ? raw[i] : 0;
				if (arg)
					*arg = &spec.args[i];
			}
		return v;
	};
	const ArgSpec *elem = nullptr;
	uint64_t elem_value = value_of(spec.bytes->element, &elem);
	uint64_t size = 0; // the element's
	if (elem && elem->type == ArgType::Enum) {
		auto table = specs.sizes.find(elem->enum_name);
		if (table != specs.sizes.end()) {
			auto it = table->second.find((int32_t)elem_value);
			if (it != table->second.end())
				size = it->second;
		}
	} else if (elem) {
		// The size itself, at its type's width (a 32-bit field's
		// neighbour shares the 8 bytes read); a negative size is none.
		int64_t v = elem->type == ArgType::U32 ? int64_t(uint32_t(elem_value))
			: elem->type == ArgType::I32   ? int64_t(int32_t(elem_value))
						       : int64_t(elem_value);
		size = v > 0 ? uint64_t(v) : 0;
	}
	return size ? value_of(spec.bytes->count, nullptr) * size : 0;
}

// A "symbol" argument's name (its address in hex where it resolves to
// none), interned.
static uint64_t symbol_id(Symbolizer *sym, Interner &names, uint32_t tgid, uint64_t v)
{
	std::optional<std::string> name;
	if (sym)
		name = sym->resolve(tgid, v);
	return names.id(name ? *name : hex(v));
}

std::string left_text(uint16_t flags, const std::optional<std::string> &type_info)
{
	if (flags & EACGM_SPAN_LEFT_FORCED)
		return "unwound by pthread_exit or pthread_cancel";
	if (flags & EACGM_SPAN_LEFT_LONGJMP)
		return "left by longjmp";
	// The symbol of a std::type_info object: "typeinfo for c10::Error".
	static const std::string prefix = "typeinfo for ";
	if (type_info && type_info->starts_with(prefix) && type_info->find('+') == std::string::npos)
		return "threw " + type_info->substr(prefix.size());
	return "threw an exception";
}

void name_exception_type(const eacgm_span_event &e, Symbolizer &sym)
{
	// The program reads at most sizeof(args) - 2 bytes and a NUL: a name
	// that long may be cut, and is left to the symbols of the process.
	const char *raw = reinterpret_cast<const char *>(e.args);
	const size_t n = strnlen(raw, sizeof(e.args));
	if (n == 0 || n >= sizeof(e.args) - 2)
		return;
	if (auto type = demangle_type(std::string_view(raw, n)))
		sym.name_object(e.tgid, e.ret, "typeinfo for " + *type);
}

DecodePlan decode_plan(const ProbeSpec &spec)
{
	DecodePlan p;
	p.ret_width = uint8_t(return_width(spec.returns));
	p.general = spec.bytes || spec.alias;
	size_t slot = 0;
	for (auto &a : spec.args) {
		if (slot < EACGM_MAX_ARGS) {
			if (a.type == ArgType::Bytes &&
			    p.bytes_slot < 0) // the first bytes argument is what the call moved
				p.bytes_slot = int8_t(slot);
			else if (a.type == ArgType::Symbol)
				p.symbols[p.n_symbols++] = uint8_t(slot);
		}
		slot += arg_width(a);
	}
	return p;
}

// The arguments of a probe with a bytes or alias rule, which read them by
// name: the spec walked, each argument's raw value by its place.
static void decode_by_rules(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym,
			    Interner &names, TypedSpan &t)
{
	// Each argument's raw value, by its place in spec.args (for the bytes
	// and alias rules): no map built per span.
	std::array<uint64_t, EACGM_MAX_ARGS> raw{};
	bool have_bytes = false;
	size_t slot = 0, index = 0;
	for (auto &a : spec.args) {
		uint64_t v = slot < EACGM_MAX_ARGS ? e.args[slot] : 0;
		if (index < raw.size())
			raw[index] = v;
		index++;
		if (a.type == ArgType::Bytes && !have_bytes) { // the first bytes argument is what the call moved
			t.bytes = v;
			have_bytes = true;
		} else if (a.type == ArgType::Symbol && slot < EACGM_MAX_ARGS) {
			t.args[slot] = symbol_id(sym, names, e.tgid, v);
		}
		slot += arg_width(a);
	}
	// A handle the call made stands for its function from now on, if the
	// call succeeded (returned 0): a failed one leaves it unset.
	if (spec.alias && sym && e.ret == 0) {
		uint64_t handle = raw[spec.alias->handle], target = raw[spec.alias->target];
		if (handle && handle != target)
			sym->alias(e.tgid, handle, target);
	}
	if (spec.bytes) // set last, replacing what a "bytes" argument gave
		t.bytes = bytes_by_rule(spec, specs, raw);
}

TypedSpan decode_typed(const eacgm_span_event &e, const ProbeSpec &spec, const DecodePlan &plan, const SpecSet &specs,
		       Symbolizer *sym, Interner &names)
{
	TypedSpan t{.start_ns = e.start_ns,
		    .dur_ns = e.dur_ns,
		    .pid = e.tgid,
		    .tid = e.tid,
		    .depth = e.depth,
		    .spec_id = e.spec_id};
	std::copy(std::begin(e.args), std::end(e.args), t.args.begin());
	if (plan.general) {
		decode_by_rules(e, spec, specs, sym, names, t);
	} else {
		if (plan.bytes_slot >= 0)
			t.bytes = e.args[plan.bytes_slot];
		for (uint8_t i = 0; i < plan.n_symbols; i++)
			t.args[plan.symbols[i]] = symbol_id(sym, names, e.tgid, e.args[plan.symbols[i]]);
	}
	switch (plan.ret_width) {
	case 8: t.ret = (int64_t)e.ret; break;
	case 4: t.ret = (int32_t)e.ret; break; // i32, or an enum: C enums are ints, the upper half is undefined
	default: break;                        // void
	}
	if (e.flags & EACGM_SPAN_RUNQ)
		t.runq_ns = e.runq_ns;
	if (e.flags & EACGM_SPAN_LEFT) {
		t.ret = 0; // the record's ret is the exception's type, not a return
		t.left = names.id(left_text(e.flags, sym && e.ret ? sym->resolve_object(e.tgid, e.ret) : std::nullopt));
	}
	return t;
}

TypedSpan decode_typed(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym,
		       Interner &names)
{
	return decode_typed(e, spec, decode_plan(spec), specs, sym, names);
}

nlohmann::json render_arg(const ArgSpec &a, uint64_t v, uint64_t next, const SpecSet &specs, const Interner &names,
			  TensorFormatter tensors)
{
	switch (a.type) {
	case ArgType::U64: return v;
	case ArgType::I64: return (int64_t)v;
	case ArgType::U32: return (uint32_t)v;
	case ArgType::I32: return (int32_t)v;
	case ArgType::Ptr: return hex(v);
	case ArgType::Bytes: return v;
	// dim3 {x, y, z} by value: x and y share the first slot.
	case ArgType::Dim3: return {(uint32_t)v, (uint32_t)(v >> 32), (uint32_t)next};
	case ArgType::Enum: return enum_name(specs.enums, a.enum_name, enum_value(a, v));
	case ArgType::Tensor: return tensors ? tensors(v, next) : nlohmann::json::array({hex(v), hex(next)});
	case ArgType::Symbol: return names.text(static_cast<StrId>(v));
	}
	return nullptr; // not reached: every type is a case above
}

std::string ret_text(const ProbeSpec &spec, const SpecSet &specs, int64_t ret)
{
	return returns_enum(spec.returns) ? enum_name(specs.enums, spec.returns, ret) : std::string();
}

Span render_span(const TypedSpan &t, const ProbeSpec &spec, const SpecSet &specs, const Interner &names,
		 TensorFormatter tensors)
{
	Span s;
	s.start_ns = t.start_ns;
	s.dur_ns = t.dur_ns;
	s.pid = t.pid;
	s.tid = t.tid;
	s.depth = t.depth;
	s.layer = spec.layer;
	s.name = spec.function;
	s.bytes = t.bytes;
	s.ret = t.ret;
	size_t slot = 0;
	for (auto &a : spec.args) {
		uint64_t v = slot < EACGM_MAX_ARGS ? t.args[slot] : 0;
		uint64_t next = slot + 1 < EACGM_MAX_ARGS ? t.args[slot + 1] : 0;
		s.args[a.name] = render_arg(a, v, next, specs, names, tensors);
		slot += arg_width(a);
	}
	s.ret_name = t.left ? names.text(static_cast<StrId>(t.left)) : ret_text(spec, specs, s.ret);
	// Kept only where the thread waited (most calls never do), under a name
	// no spec argument takes: kRunqArg (common/model.h).
	if (t.runq_ns > 0)
		s.args[kRunqArg] = t.runq_ns;
	if (t.weight != 1.0)
		s.args[kWeightArg] = t.weight;
	return s;
}

Span decode_span(const eacgm_span_event &e, const ProbeSpec &spec, const SpecSet &specs, Symbolizer *sym,
		 Interner &names, TensorFormatter tensors)
{
	return render_span(decode_typed(e, spec, specs, sym, names), spec, specs, names, tensors);
}

} // namespace eacgm
