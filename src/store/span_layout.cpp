// SPDX-License-Identifier: Apache-2.0
// Span blocks' columns, and args taken apart and put back (span_layout.h).
#include "store/span_layout.h"
#include "common/text.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace eacgm {

std::vector<ColumnCoding> span_codings(size_t slots)
{
	std::vector<ColumnCoding> c(kColSlot0 + slots, {Coding::Plain});
	c[kColId] = {Coding::Delta};
	c[kColStart] = {Coding::DeltaBy, kColTid}; // a thread's calls follow each other
	c[kColRet] = {Coding::Signed};
	for (size_t s = 0; s < slots; s++)
		c[kColSlot0 + s] = {Coding::DeltaBy, kColFn}; // a function's pointers move little call to call
	return c;
}

std::vector<ColumnCoding> metric_codings()
{
	std::vector<ColumnCoding> c(kMetColumns, {Coding::Plain});
	c[kMetId] = {Coding::Delta};
	c[kMetTs] = {Coding::Delta};                  // an interval's samples share their time
	c[kMetValue] = {Coding::DeltaBy, kMetSeries}; // a series' value often repeats
	return c;
}

std::optional<ArgKind> arg_kind(char letter)
{
	switch (letter) {
	case char(ArgKind::Int): return ArgKind::Int;
	case char(ArgKind::Uint): return ArgKind::Uint;
	case char(ArgKind::Bool): return ArgKind::Bool;
	case char(ArgKind::Ptr): return ArgKind::Ptr;
	case char(ArgKind::Text): return ArgKind::Text;
	case char(ArgKind::Ints): return ArgKind::Ints;
	}
	return std::nullopt;
}

std::string args_schema_json(const std::vector<ArgDef> &args)
{
	nlohmann::json a = nlohmann::json::array();
	for (const ArgDef &d : args)
		a.push_back(d.kind == ArgKind::Ints ? nlohmann::json{d.key, std::string(1, char(d.kind)), d.n}
						    : nlohmann::json{d.key, std::string(1, char(d.kind))});
	return a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<SpanFunction> parse_function(std::string layer, std::string name, std::string_view args_json)
{
	auto bad = [&] {
		return make_error(ErrorKind::BadInput,
				  "function " + layer + "/" + name + " has a damaged argument list");
	};
	auto a = nlohmann::json::parse(args_json, nullptr, false);
	if (!a.is_array())
		return bad();
	SpanFunction f{std::move(layer), std::move(name), {}, 0, {}, {}};
	for (const auto &d : a) {
		if (!d.is_array() || d.size() < 2 || !d[0].is_string() || !d[1].is_string() ||
		    d[1].get_ref<const std::string &>().size() != 1)
			return bad();
		auto kind = arg_kind(d[1].get<std::string>()[0]);
		if (!kind)
			return bad();
		ArgDef def{d[0].get<std::string>(), *kind, 1};
		if (def.kind == ArgKind::Ints) {
			if (d.size() != 3 || !d[2].is_number_unsigned() || d[2].get<uint64_t>() > kMaxSlots)
				return bad();
			def.n = static_cast<uint8_t>(d[2].get<uint64_t>());
		}
		f.slots += def.n;
		f.key_texts += nlohmann::json(def.key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
		f.key_texts += ':';
		f.key_ends.push_back(static_cast<uint32_t>(f.key_texts.size()));
		f.args.push_back(std::move(def));
	}
	if (f.slots > kMaxSlots)
		return bad();
	return f;
}

void render_args(const SpanFunction &f, const Columns &cols, size_t row, StringSource &strings, std::string &out)
{
	out += '{';
	size_t slot = kColSlot0;
	uint32_t key_begin = 0;
	char num[24];
	auto slot_value = [&](size_t s) { return s < cols.size() ? cols[s][row] : 0; };
	for (size_t i = 0; i < f.args.size(); i++) {
		if (i)
			out += ',';
		out.append(f.key_texts, key_begin, f.key_ends[i] - key_begin);
		key_begin = f.key_ends[i];
		const ArgDef &d = f.args[i];
		const uint64_t v = slot_value(slot);
		switch (d.kind) {
		case ArgKind::Int: out.append(num, snprintf(num, sizeof num, "%lld", static_cast<long long>(v))); break;
		case ArgKind::Uint:
			out.append(num, snprintf(num, sizeof num, "%llu", static_cast<unsigned long long>(v)));
			break;
		case ArgKind::Bool: out += v ? "true" : "false"; break;
		case ArgKind::Ptr:
			out += '"';
			out += hex(v);
			out += '"';
			break;
		case ArgKind::Ints:
			out += '[';
			for (size_t k = 0; k < d.n; k++) {
				if (k)
					out += ',';
				out.append(num,
					   snprintf(num, sizeof num, "%lld",
						    static_cast<long long>(slot_value(slot + k))));
			}
			out += ']';
			break;
		case ArgKind::Text: out += strings.text(v);
		}
		slot += d.n;
	}
	out += '}';
}

ArgDef classify_arg(const std::string &key, const nlohmann::json &v, std::vector<uint64_t> &slots)
{
	if (v.is_number_integer() && !v.is_number_unsigned()) {
		slots.push_back(static_cast<uint64_t>(v.get<int64_t>()));
		return {key, ArgKind::Int, 1};
	}
	if (v.is_number_unsigned()) {
		const uint64_t u = v.get<uint64_t>();
		slots.push_back(u);
		return {key, u > uint64_t(INT64_MAX) ? ArgKind::Uint : ArgKind::Int, 1};
	}
	if (v.is_boolean()) {
		slots.push_back(v.get<bool>());
		return {key, ArgKind::Bool, 1};
	}
	if (v.is_string()) {
		const std::string &t = v.get_ref<const std::string &>();
		if (t.size() > 2 && t.size() <= 18 && t[0] == '0' && t[1] == 'x') {
			uint64_t x = std::strtoull(t.c_str() + 2, nullptr, 16);
			if (hex(x) == t) { // exactly as it will be written back
				slots.push_back(x);
				return {key, ArgKind::Ptr, 1};
			}
		}
	}
	if (v.is_array() && !v.empty() && v.size() <= 8 && std::all_of(v.begin(), v.end(), [](const nlohmann::json &e) {
		    return e.is_number_integer() &&
			    (!e.is_number_unsigned() || e.get<uint64_t>() <= uint64_t(INT64_MAX));
	    })) {
		for (const auto &e : v)
			slots.push_back(static_cast<uint64_t>(e.get<int64_t>()));
		return {key, ArgKind::Ints, static_cast<uint8_t>(v.size())};
	}
	return {key, ArgKind::Text, 1};
}

} // namespace eacgm
