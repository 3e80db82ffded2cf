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

std::string args_schema_json(const std::vector<ArgDef> &args)
{
	nlohmann::json a = nlohmann::json::array();
	for (const ArgDef &d : args)
		a.push_back(d.kind == 'a' ? nlohmann::json{d.key, std::string(1, d.kind), d.n}
					  : nlohmann::json{d.key, std::string(1, d.kind)});
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
		ArgDef def{d[0].get<std::string>(), d[1].get<std::string>()[0], 1};
		if (def.kind == 'a') {
			if (d.size() != 3 || !d[2].is_number_unsigned() || d[2].get<uint64_t>() > kMaxSlots)
				return bad();
			def.n = static_cast<uint8_t>(d[2].get<uint64_t>());
		} else if (std::string_view("iubxs").find(def.kind) == std::string_view::npos) {
			return bad();
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
		case 'i': out.append(num, snprintf(num, sizeof num, "%lld", static_cast<long long>(v))); break;
		case 'u': out.append(num, snprintf(num, sizeof num, "%llu", static_cast<unsigned long long>(v))); break;
		case 'b': out += v ? "true" : "false"; break;
		case 'x':
			out += '"';
			out += hex(v);
			out += '"';
			break;
		case 'a':
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
		default: // 's'
			out += strings.text(v);
		}
		slot += d.n;
	}
	out += '}';
}

ArgDef classify_arg(const std::string &key, const nlohmann::json &v, std::vector<uint64_t> &slots)
{
	if (v.is_number_integer() && !v.is_number_unsigned()) {
		slots.push_back(static_cast<uint64_t>(v.get<int64_t>()));
		return {key, 'i', 1};
	}
	if (v.is_number_unsigned()) {
		const uint64_t u = v.get<uint64_t>();
		slots.push_back(u);
		return {key, u > uint64_t(INT64_MAX) ? 'u' : 'i', 1};
	}
	if (v.is_boolean()) {
		slots.push_back(v.get<bool>());
		return {key, 'b', 1};
	}
	if (v.is_string()) {
		const std::string &t = v.get_ref<const std::string &>();
		if (t.size() > 2 && t.size() <= 18 && t[0] == '0' && t[1] == 'x') {
			uint64_t x = std::strtoull(t.c_str() + 2, nullptr, 16);
			if (hex(x) == t) { // exactly as it will be written back
				slots.push_back(x);
				return {key, 'x', 1};
			}
		}
	}
	if (v.is_array() && !v.empty() && v.size() <= 8 && std::all_of(v.begin(), v.end(), [](const nlohmann::json &e) {
		    return e.is_number_integer() &&
			    (!e.is_number_unsigned() || e.get<uint64_t>() <= uint64_t(INT64_MAX));
	    })) {
		for (const auto &e : v)
			slots.push_back(static_cast<uint64_t>(e.get<int64_t>()));
		return {key, 'a', static_cast<uint8_t>(v.size())};
	}
	return {key, 's', 1};
}

} // namespace eacgm
