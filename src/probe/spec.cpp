// SPDX-License-Identifier: Apache-2.0
#include "probe/spec.h"

#include <algorithm>
#include <cerrno>
#include <fnmatch.h>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "arch/arch.h"

namespace eacgm {

using nlohmann::json;

void SpecSet::merge(SpecSet other)
{
	for (auto &p : other.probes)
		probes.push_back(std::move(p));
	for (auto &[name, table] : other.enums)
		enums[name].insert(table.begin(), table.end());
	for (auto &[name, table] : other.sizes)
		sizes[name].insert(table.begin(), table.end());
	tensor_layouts.insert(other.tensor_layouts.begin(), other.tensor_layouts.end());
	for (auto &[version, fields] : other.layouts)
		layouts[version].insert(fields.begin(), fields.end());
}

static std::string line_col(const std::string &text, size_t byte)
{
	size_t line = 1, col = 1;
	for (size_t i = 0; i < byte && i < text.size(); i++) {
		if (text[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	// nlohmann reports the byte after the offending token.
	return "line " + std::to_string(line) + ", column " + std::to_string(col > 1 ? col - 1 : col);
}

static const std::map<std::string, ArgType> kArgTypes = {
	{"u64", ArgType::U64},
	{"i64", ArgType::I64},
	{"u32", ArgType::U32},
	{"i32", ArgType::I32},
	{"ptr", ArgType::Ptr},
	{"bytes", ArgType::Bytes},
	{"dim3", ArgType::Dim3},
	{"enum", ArgType::Enum},
	{"symbol", ArgType::Symbol},
	{"tensor", ArgType::Tensor},
	{"tensor_list", ArgType::Tensor},
};

int arg_width(const ArgSpec &a) { return a.type == ArgType::Dim3 || a.type == ArgType::Tensor ? 2 : 1; }

bool reads_layout(const ProbeSpec &p)
{
	if (p.tensor_args > 0)
		return true;
	for (auto &a : p.args)
		if (a.type == ArgType::Tensor || !a.offset_field.empty() || !a.offset2_field.empty())
			return true;
	return false;
}

// Unknown keys are typos more often than not ("retruns"): say so.
static Result<void> known_keys(const json &j, std::initializer_list<const char *> keys, const std::string &where)
{
	for (auto &[k, v] : j.items()) {
		bool ok = false;
		for (const char *key : keys)
			ok = ok || k == key;
		if (!ok) {
			std::string list;
			for (const char *key : keys)
				list += std::string(list.empty() ? "" : ", ") + key;
			return make_error(ErrorKind::BadInput,
					  where + ": unknown key \"" + k + "\" (known: " + list + ")");
		}
	}
	return {};
}

// A key's text, `fallback` when it is absent. json::value() would throw
// type_error on a value of another kind ({"layer": []}), and nothing above
// the parser catches it.
static Result<std::string> string_value(const json &j, const char *key, const std::string &fallback,
					const std::string &where)
{
	if (!j.contains(key))
		return fallback;
	if (!j[key].is_string())
		return make_error(ErrorKind::BadInput, where + ": \"" + key + "\" must be a string");
	return j[key].get<std::string>();
}

// "offset": N reads 8 bytes at the pointer + N; [N, M] follows the pointer
// found at + N and reads 8 bytes at that + M (a member of a struct that a
// struct points to: gloo's options -> its context -> rank). Two levels are
// read at entry only. An offset may be a name instead ("Class.member_"),
// looked up in "layouts" for the version of the library found.
static Result<void> parse_offset(const json &j, const std::string &at, ArgSpec &a)
{
	if (!j.contains("offset"))
		return {};
	const json &o = j["offset"];
	static const std::regex field("[A-Za-z_]\\w*(\\.[A-Za-z_]\\w*)+");
	auto one = [&](const json &v, uint16_t &n, std::string &name) {
		if (v.is_number_unsigned() && v.get<uint64_t>() <= 0xffff) {
			n = v.get<uint16_t>();
			return true;
		}
		if (v.is_string() && std::regex_match(v.get<std::string>(), field)) {
			name = v.get<std::string>();
			return true;
		}
		return false;
	};
	if (one(o, a.offset, a.offset_field))
		return {};
	if (o.is_array() && o.size() == 2 && one(o[0], a.offset, a.offset_field) &&
	    one(o[1], a.offset2, a.offset2_field)) {
		if (a.source != EACGM_ARG_DEREF_ENTRY)
			return make_error(ErrorKind::BadInput,
					  at + ": a two-level \"offset\" is read at \"entry\" only");
		a.source = EACGM_ARG_DEREF2_ENTRY;
		return {};
	}
	return make_error(
		ErrorKind::BadInput,
		at +
			": \"offset\" must be a number 0..65535 or a \"Class.member\" named in \"layouts\", or "
			"two of them [N, M] to read at (*(ptr + N) + M)");
}

// "size": an enum field's width in bytes, when it is not a C enum's 4.
static Result<void> parse_size(const json &j, const std::string &at, ArgSpec &a)
{
	if (!j.contains("size"))
		return {};
	const json &v = j["size"];
	if (a.type != ArgType::Enum || !v.is_number_unsigned() ||
	    (v.get<uint64_t>() != 1 && v.get<uint64_t>() != 2 && v.get<uint64_t>() != 4 && v.get<uint64_t>() != 8))
		return make_error(ErrorKind::BadInput, at + ": \"size\" is an enum's width in bytes: 1, 2, 4 or 8");
	a.size = v.get<uint8_t>();
	return {};
}

static Result<ArgSpec> parse_arg(const json &j, const std::string &where, const std::map<std::string, EnumTable> &enums)
{
	if (!j.is_object())
		return make_error(ErrorKind::BadInput,
				  where +
					  ": an argument must be an object like {\"name\": \"size\", \"slot\": 1, "
					  "\"type\": \"bytes\"}");
	ArgSpec a;
	if (auto r = known_keys(j, {"name", "slot", "type", "enum", "size", "deref", "offset"}, where + " argument");
	    !r)
		return r.error();
	if (!j.contains("name") || !j["name"].is_string())
		return make_error(ErrorKind::BadInput, where + ": argument needs a \"name\" string");
	a.name = j["name"];
	std::string at = where + " argument '" + a.name + "'";
	// The whole number: as unsigned, 4294967296 would pass as slot 0.
	if (j.contains("slot") && j["slot"] == "result")
		a.slot = EACGM_SLOT_RESULT;
	else if (!j.contains("slot") || !j["slot"].is_number_unsigned() || j["slot"].get<uint64_t>() > 31)
		return make_error(ErrorKind::BadInput,
				  at +
					  ": \"slot\" must be a number 0..31 (the argument word, from 0) or \"result\" "
					  "(see docs/layers.md)");
	else
		a.slot = j["slot"].get<uint8_t>();
	auto type_text = string_value(j, "type", "u64", at);
	if (!type_text)
		return type_text.error();
	const std::string &type = *type_text;
	auto t = kArgTypes.find(type);
	if (t == kArgTypes.end())
		return make_error(ErrorKind::BadInput,
				  at + ": unknown type \"" + type +
					  "\"; use u64, i64, u32, i32, ptr, bytes, dim3, enum, symbol or tensor_list");
	a.type = t->second;
	a.tensor_list = type == "tensor_list";
	if (a.type == ArgType::Enum) {
		auto name = string_value(j, "enum", "", at);
		if (!name)
			return name.error();
		a.enum_name = *name;
		if (!enums.count(a.enum_name))
			return make_error(ErrorKind::BadInput,
					  at + ": enum \"" + a.enum_name + "\" is not defined in \"enums\"");
	}
	auto deref_text = string_value(j, "deref", "", at);
	if (!deref_text)
		return deref_text.error();
	const std::string &deref = *deref_text;
	if (deref.empty())
		a.source = EACGM_ARG_ENTRY;
	else if (deref == "entry")
		a.source = EACGM_ARG_DEREF_ENTRY;
	else if (deref == "exit")
		a.source = EACGM_ARG_DEREF_EXIT;
	else
		return make_error(ErrorKind::BadInput, at + ": \"deref\" must be \"entry\" or \"exit\"");
	if (deref.empty() && j.contains("offset"))
		return make_error(ErrorKind::BadInput, at + ": \"offset\" needs \"deref\"");
	if (auto r = parse_offset(j, at, a); !r)
		return r.error();
	if (auto r = parse_size(j, at, a); !r)
		return r.error();
	if (a.type == ArgType::Tensor && !a.tensor_list)
		return make_error(ErrorKind::BadInput,
				  at +
					  ": tensors are kept with \"tensor_args\" on a \"match\" probe (their layout "
					  "depends on the torch version found)");
	if (a.tensor_list && (a.source != EACGM_ARG_ENTRY || j.contains("offset")))
		return make_error(ErrorKind::BadInput,
				  at +
					  ": a \"tensor_list\" is the slot itself (a std::vector<at::Tensor>&), "
					  "not dereferenced");
	if (a.type == ArgType::Dim3 && a.source != EACGM_ARG_ENTRY)
		return make_error(ErrorKind::BadInput, at + ": a dim3 is passed by value and cannot be dereferenced");
	return a;
}

static bool valid_layer_name(const std::string &s)
{
	static const std::regex re("[a-z][a-z0-9_]{0,31}");
	return std::regex_match(s, re);
}

// The text as JSON, or the syntax error at its line and column.
static Result<json> parse_json(const std::string &text, const std::string &origin)
{
	try {
		return json::parse(text);
	} catch (const json::parse_error &e) {
		// e.what(): "[json.exception.parse_error.101] parse error at line L,
		// column C: <detail>"; the detail may itself hold ": ".
		std::string what = e.what();
		auto col = what.find("column ");
		auto colon = what.find(": ", col == std::string::npos ? 0 : col);
		std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
		return make_error(ErrorKind::BadInput,
				  origin + ": JSON syntax error at " + line_col(text, e.byte) + ": " + detail);
	} catch (const json::exception &e) {
		// Valid syntax the parser still refuses: a number beyond a double
		// ("1e400") is out_of_range.406, not a parse_error. what() is
		// "[json.exception.out_of_range.406] number overflow parsing '1e400'".
		std::string what = e.what();
		auto bracket = what.find("] ");
		return make_error(
			ErrorKind::BadInput,
			origin + ": JSON error: " + (bracket == std::string::npos ? what : what.substr(bracket + 2)));
	}
}

// A key of an "enums" or "sizes" table: a number, decimal or 0x hex.
static std::optional<int64_t> table_key(const std::string &k)
{
	char *end = nullptr;
	long long n = std::strtoll(k.c_str(), &end, 0);
	if (k.empty() || *end)
		return std::nullopt;
	return n;
}

static Result<void> parse_enums(const json &doc, const std::string &origin, SpecSet &set)
{
	if (!doc.is_object())
		return make_error(ErrorKind::BadInput,
				  origin + ": \"enums\" must map enum names to {\"value\": \"name\"} objects");
	for (auto &[name, table] : doc.items()) {
		if (!table.is_object())
			return make_error(ErrorKind::BadInput,
					  origin + ": enum \"" + name + "\" must be an object of \"value\": \"name\"");
		EnumTable t;
		for (auto &[k, v] : table.items()) {
			auto n = table_key(k);
			if (!n || !v.is_string())
				return make_error(ErrorKind::BadInput,
						  origin + ": enum \"" + name + "\": entry \"" + k +
							  "\" must be a number mapped to a name");
			t[*n] = v.get<std::string>();
		}
		set.enums[name] = std::move(t);
	}
	return {};
}

static Result<void> parse_sizes(const json &doc, const std::string &origin, SpecSet &set)
{
	if (!doc.is_object())
		return make_error(ErrorKind::BadInput,
				  origin + ": \"sizes\" must map enum names to {\"value\": bytes} objects");
	for (auto &[name, table] : doc.items()) {
		if (!set.enums.count(name))
			return make_error(ErrorKind::BadInput,
					  origin + ": \"sizes\" names enum \"" + name +
						  "\", which \"enums\" does not define");
		for (auto &[k, v] : table.items()) {
			auto n = table_key(k);
			if (!n || !v.is_number_unsigned())
				return make_error(ErrorKind::BadInput,
						  origin + ": sizes of \"" + name + "\": entry \"" + k +
							  "\" must be a number mapped to a byte count");
			set.sizes[name][*n] = v.get<uint64_t>();
		}
	}
	return {};
}

static Result<void> parse_tensor_layouts(const json &doc, const std::string &origin, SpecSet &set)
{
	if (!doc.is_object())
		return make_error(ErrorKind::BadInput,
				  origin + ": \"tensor_layouts\" must map versions to {\"ndim\": OFFSET, ...}");
	for (auto &[version, l] : doc.items()) {
		if (!l.is_object() || !l.contains("ndim") || !l.contains("dtype") || !l["ndim"].is_number_unsigned() ||
		    !l["dtype"].is_number_unsigned() || l["ndim"].get<uint64_t>() > 0xffff ||
		    l["dtype"].get<uint64_t>() > 0xffff)
			return make_error(ErrorKind::BadInput,
					  origin + ": tensor layout \"" + version +
						  "\" must be {\"ndim\": OFFSET, \"dtype\": OFFSET}");
		set.tensor_layouts[version] = {l["ndim"].get<uint16_t>(), l["dtype"].get<uint16_t>()};
	}
	return {};
}

// "layouts": {"1.13": {"Class.member_": OFFSET, ...}, ...}.
static Result<void> parse_layouts(const json &doc, const std::string &origin, SpecSet &set)
{
	const std::string form = origin + ": \"layouts\" must map versions to {\"Class.member\": OFFSET} objects";
	if (!doc.is_object())
		return make_error(ErrorKind::BadInput, form);
	for (auto &[version, fields] : doc.items()) {
		if (!fields.is_object())
			return make_error(ErrorKind::BadInput, form);
		for (auto &[name, off] : fields.items()) {
			if (!off.is_number_unsigned() || off.get<uint64_t>() > 0xffff)
				return make_error(ErrorKind::BadInput,
						  form + " (\"" + version + "\" \"" + name +
							  "\" is not an offset 0..65535)");
			set.layouts[version][name] = off.get<uint16_t>();
		}
	}
	return {};
}

// What a probe attaches to: every function "match" finds, the "symbols"
// listed, or else the function's own name.
static Result<void> parse_targets(const json &pj, const std::string &where, ProbeSpec &p)
{
	if (pj.contains("match")) {
		if (!pj["match"].is_string() || pj.contains("symbols"))
			return make_error(ErrorKind::BadInput,
					  where + ": \"match\" is one regular expression, and excludes \"symbols\"");
		p.match = pj["match"];
		try {
			std::regex check(p.match);
		} catch (const std::regex_error &e) {
			return make_error(ErrorKind::BadInput,
					  where + ": \"match\" is not a valid regular expression: " + e.what());
		}
	} else if (pj.contains("symbols")) {
		if (!pj["symbols"].is_array())
			return make_error(ErrorKind::BadInput, where + ": \"symbols\" must be an array of names");
		for (auto &s : pj["symbols"]) {
			if (!s.is_string())
				return make_error(ErrorKind::BadInput,
						  where + ": \"symbols\" must be an array of names");
			p.symbols.push_back(s.get<std::string>());
		}
	} else {
		p.symbols.push_back(p.function);
	}
	return {};
}

static Result<void> parse_args(const json &pj, const std::string &where, const SpecSet &set, ProbeSpec &p)
{
	if (!pj.contains("args"))
		return {};
	if (!pj["args"].is_array())
		return make_error(ErrorKind::BadInput, where + ": \"args\" must be an array");
	for (auto &aj : pj["args"]) {
		auto a = parse_arg(aj, where, set.enums);
		if (!a)
			return a.error();
		p.args.push_back(std::move(a.value()));
	}
	return {};
}

// "bytes": count x the element size, both arguments the probe keeps: the
// element an enum with a "sizes" table (NCCL's datatype) or an integer that is
// the size itself (gloo's elementSize).
static Result<void> parse_bytes_rule(const json &bj, const std::string &where, const SpecSet &set, ProbeSpec &p)
{
	if (!bj.is_object() || !bj.contains("count") || !bj.contains("element") || !bj["count"].is_string() ||
	    !bj["element"].is_string())
		return make_error(ErrorKind::BadInput,
				  where + ": \"bytes\" must be {\"count\": ARG, \"element\": ARG}");
	BytesRule b{bj["count"].get<std::string>(), bj["element"].get<std::string>()};
	auto find = [&](const std::string &n) -> const ArgSpec * {
		for (auto &a : p.args)
			if (a.name == n)
				return &a;
		return nullptr;
	};
	const ArgSpec *count = find(b.count), *elem = find(b.element);
	if (!count || !elem)
		return make_error(ErrorKind::BadInput, where + ": \"bytes\" names an argument the probe does not keep");
	bool integer = elem->type == ArgType::U64 || elem->type == ArgType::I64 || elem->type == ArgType::U32 ||
		elem->type == ArgType::I32;
	if (!integer && (elem->type != ArgType::Enum || !set.sizes.count(elem->enum_name)))
		return make_error(
			ErrorKind::BadInput,
			where + ": \"bytes\" element '" + b.element +
				"' must be an integer argument (the element's size) or an enum with a \"sizes\" "
				"table");
	p.bytes = b;
	return {};
}

size_t probe_index(const SpecSet &s, std::string_view function)
{
	size_t i = 0;
	while (i < s.probes.size() && s.probes[i].function != function)
		i++;
	return i;
}

// The plain return types and how many bytes of the return register each holds; none: an
// enum. Compared a character at a time: decode asks for every call.
static std::optional<int> plain_return_width(const std::string &r)
{
	auto is = [&](const char(&t)[4]) { return r[0] == t[0] && r[1] == t[1] && r[2] == t[2]; };
	if (r.size() == 3 && (is("i64") || is("u64") || is("ptr")))
		return 8;
	if (r.size() == 3 && is("i32"))
		return 4;
	if (r.size() == 4 && is("voi") && r[3] == 'd')
		return 0;
	return std::nullopt;
}

bool returns_enum(const std::string &returns) { return !plain_return_width(returns); }

// A C enum is an int.
int return_width(const std::string &returns) { return plain_return_width(returns).value_or(4); }

static Result<void> parse_returns(const json &pj, const std::string &where, const SpecSet &set, ProbeSpec &p)
{
	auto returns = string_value(pj, "returns", "i64", where);
	if (!returns)
		return returns.error();
	p.returns = *returns;
	if (returns_enum(p.returns) && !set.enums.count(p.returns))
		return make_error(ErrorKind::BadInput,
				  where + ": \"returns\" must be void, i32, i64, u64, ptr or a defined enum, not \"" +
					  p.returns + "\"");
	return {};
}

// "alias": {"handle": ARG, "for": ARG}: after the call, ARG handle's value
// names the function of symbol argument "for" (AliasRule).
static Result<void> parse_alias_rule(const json &aj, const std::string &where, ProbeSpec &p)
{
	const std::string form = where +
		": \"alias\" must be {\"handle\": ARG, \"for\": ARG}, two arguments the "
		"probe keeps, \"for\" a symbol";
	if (!aj.is_object() || !aj.contains("handle") || !aj.contains("for") || !aj["handle"].is_string() ||
	    !aj["for"].is_string() || aj.size() != 2)
		return make_error(ErrorKind::BadInput, form);
	auto index = [&](const std::string &n) {
		size_t i = 0;
		while (i < p.args.size() && p.args[i].name != n)
			i++;
		return i;
	};
	AliasRule rule{index(aj["handle"]), index(aj["for"])};
	if (rule.handle == p.args.size() || rule.target == p.args.size())
		return make_error(ErrorKind::BadInput,
				  form + " (\"" +
					  (rule.handle == p.args.size() ? aj["handle"] : aj["for"]).get<std::string>() +
					  "\" is not one of its arguments)");
	if (p.args[rule.target].type != ArgType::Symbol)
		return make_error(ErrorKind::BadInput,
				  form + " (\"" + aj["for"].get<std::string>() + "\" is not a symbol)");
	const ArgType h = p.args[rule.handle].type;
	if (h == ArgType::Symbol || h == ArgType::Dim3 || h == ArgType::Enum || h == ArgType::Tensor)
		return make_error(ErrorKind::BadInput, form + " (the handle must be an integer or a pointer)");
	p.alias = rule;
	return {};
}

// "issues": {"layer": L, "by": [ARG, ...]} (IssueRule), or an array of them:
// every ARG one the probe keeps.
static Result<void> parse_issue_rule(const json &ij, const std::string &where, ProbeSpec &p)
{
	if (ij.is_array() && !ij.empty()) {
		for (auto &one : ij)
			if (one.is_array())
				return make_error(ErrorKind::BadInput,
						  where + ": \"issues\" is a rule or an array of rules");
			else if (auto r = parse_issue_rule(one, where, p); !r)
				return r;
		return {};
	}
	const std::string form = where +
		": \"issues\" must be {\"layer\": LAYER, \"by\": [ARG, ...]} or an array of them: the layer "
		"of the call that runs (or waits for) what this one issues, and the arguments both keep that "
		"tell which";
	if (!ij.is_object() || ij.size() != 2 || !ij.contains("layer") || !ij["layer"].is_string() ||
	    !ij.contains("by") || !ij["by"].is_array() || ij["by"].empty())
		return make_error(ErrorKind::BadInput, form);
	IssueRule rule{ij["layer"], {}};
	for (auto &b : ij["by"]) {
		if (!b.is_string())
			return make_error(ErrorKind::BadInput, form);
		bool kept = std::any_of(p.args.begin(), p.args.end(), [&](const ArgSpec &a) { return a.name == b; });
		if (!kept)
			return make_error(ErrorKind::BadInput,
					  form + " (\"" + b.get<std::string>() + "\" is not one of its arguments)");
		rule.by.push_back(b);
	}
	p.issues.push_back(std::move(rule));
	return {};
}

// A probe's true-or-false key, when given; `meaning` says what true means.
static Result<void> bool_key(const json &pj, const char *key, const char *meaning, const std::string &where, bool &out)
{
	if (!pj.contains(key))
		return {};
	if (!pj[key].is_boolean())
		return make_error(ErrorKind::BadInput,
				  where + ": \"" + key + "\" is true or false (true: " + meaning + ")");
	out = pj[key];
	return {};
}

// "tensor_args": N (with "match"), "waits" and "result_pointer": true.
static Result<void> parse_flags(const json &pj, const std::string &where, ProbeSpec &p)
{
	if (pj.contains("tensor_args")) {
		if (!pj["tensor_args"].is_number_unsigned() || pj["tensor_args"].get<uint64_t>() > 3 || p.match.empty())
			return make_error(ErrorKind::BadInput, where + ": \"tensor_args\" is 0..3, with \"match\"");
		p.tensor_args = pj["tensor_args"];
	}
	if (auto r = bool_key(pj, "waits",
			      "the call waits on other processes, and one in flight past --hang-after is a hang", where,
			      p.waits);
	    !r)
		return r;
	return bool_key(pj, "result_pointer", "the function returns a class by value, through a hidden pointer", where,
			p.result_pointer);
}

// The args' slots of a function that returns a class by value count its
// declared arguments; its words start after the hidden result pointer
// where the processor passes that as an argument word (x86-64), and
// "result" is that pointer wherever it is.
static Result<void> place_result_pointer(const std::string &where, ProbeSpec &p)
{
	for (auto &a : p.args) {
		if (a.slot == EACGM_SLOT_RESULT && !p.result_pointer)
			return make_error(ErrorKind::BadInput,
					  where + " argument '" + a.name +
						  "': \"slot\": \"result\" is the hidden result pointer of a function "
						  "with \"result_pointer\": true");
		if (p.result_pointer && a.slot != EACGM_SLOT_RESULT)
			a.slot = uint8_t(a.slot + arch::native_rules().result_pointer_words);
	}
	return {};
}

// One entry of "probes"; `layer` and `library` are the file's.
static Result<ProbeSpec> parse_probe(const json &pj, const std::string &layer, const std::string &library,
				     const SpecSet &set, const std::string &origin, bool user)
{
	ProbeSpec p;
	p.layer = layer;
	p.origin = origin;
	p.user = user;
	if (!pj.is_object() || !pj.contains("function") || !pj["function"].is_string())
		return make_error(ErrorKind::BadInput, origin + ": every probe needs a \"function\" name");
	p.function = pj["function"];
	std::string where = origin + ": probe '" + p.function + "'";
	if (auto r = known_keys(pj,
				{"function", "library", "symbols", "match", "args", "bytes", "alias", "returns",
				 "tensor_args", "waits", "result_pointer", "issues", "about"},
				where);
	    !r)
		return r.error();
	auto lib = string_value(pj, "library", library, where);
	if (!lib)
		return lib.error();
	p.library = *lib;
	if (p.library.empty())
		return make_error(ErrorKind::BadInput,
				  where + ": no \"library\" (give one per file or per probe, e.g. \"libcudart.so*\")");
	if (auto r = parse_targets(pj, where, p); !r)
		return r.error();
	if (auto r = parse_args(pj, where, set, p); !r)
		return r.error();
	if (pj.contains("bytes"))
		if (auto r = parse_bytes_rule(pj["bytes"], where, set, p); !r)
			return r.error();
	if (pj.contains("alias"))
		if (auto r = parse_alias_rule(pj["alias"], where, p); !r)
			return r.error();
	if (auto r = parse_flags(pj, where, p); !r)
		return r.error();
	if (pj.contains("issues"))
		if (auto r = parse_issue_rule(pj["issues"], where, p); !r)
			return r.error();
	if (reads_layout(p) && p.match.empty())
		return make_error(ErrorKind::BadInput,
				  where +
					  ": tensors and named offsets are read on a \"match\" probe only (their "
					  "layout depends on the library's version, found when it attaches)");
	if (auto r = parse_returns(pj, where, set, p); !r)
		return r.error();
	if (auto r = place_result_pointer(where, p); !r)
		return r.error();
	if (auto compiled = compile_probe(p); !compiled)
		return compiled.error();
	return p;
}

Result<SpecSet> parse_spec(const std::string &text, const std::string &origin, bool user)
{
	auto doc = parse_json(text, origin);
	if (!doc)
		return doc.error();
	if (!doc->is_object())
		return make_error(ErrorKind::BadInput,
				  origin + ": a spec is a JSON object with \"layer\", \"library\" and \"probes\"");
	if (auto r = known_keys(*doc,
				{"layer", "library", "about", "enums", "sizes", "tensor_layouts", "layouts", "probes"},
				origin);
	    !r)
		return r.error();
	SpecSet set;
	// The tables first: the probes' arguments name their enums.
	if (doc->contains("enums"))
		if (auto r = parse_enums((*doc)["enums"], origin, set); !r)
			return r.error();
	if (doc->contains("sizes"))
		if (auto r = parse_sizes((*doc)["sizes"], origin, set); !r)
			return r.error();
	if (doc->contains("tensor_layouts"))
		if (auto r = parse_tensor_layouts((*doc)["tensor_layouts"], origin, set); !r)
			return r.error();
	if (doc->contains("layouts"))
		if (auto r = parse_layouts((*doc)["layouts"], origin, set); !r)
			return r.error();
	auto layer_text = string_value(*doc, "layer", user ? "user" : "", origin);
	if (!layer_text)
		return layer_text.error();
	const std::string &layer = *layer_text;
	if (!valid_layer_name(layer))
		return make_error(ErrorKind::BadInput,
				  origin + ": \"layer\" must be a short lower-case name such as \"cuda\" or \"mylib\"");
	auto library_text = string_value(*doc, "library", "", origin);
	if (!library_text)
		return library_text.error();
	const std::string &library = *library_text;
	if (!doc->contains("probes") || !(*doc)["probes"].is_array() || (*doc)["probes"].empty())
		return make_error(ErrorKind::BadInput, origin + ": \"probes\" must be a non-empty array");
	for (auto &pj : (*doc)["probes"]) {
		auto p = parse_probe(pj, layer, library, set, origin, user);
		if (!p)
			return p.error();
		set.probes.push_back(std::move(p.value()));
	}
	return set;
}

Result<SpecSet> load_spec_file(const std::string &path, bool user)
{
	std::ifstream in(path);
	if (!in) // errno says why: missing or not allowed
		return make_error(kind_of_errno(errno),
				  "cannot read spec file " + path + ": no such file or not readable");
	std::stringstream ss;
	ss << in.rdbuf();
	return parse_spec(ss.str(), path, user);
}

static std::string self_dir()
{
	char buf[4096];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	if (n <= 0)
		return ".";
	std::string p(buf, n);
	return p.substr(0, p.rfind('/'));
}

Result<std::string> find_builtin_file(const std::string &name)
{
	// Installed layout (bin/../share/eacgm/specs), then the source tree the
	// binary was built from.
	std::vector<std::string> dirs = {self_dir() + "/../share/eacgm/specs", EACGM_SPEC_DIR};
	for (auto &d : dirs) {
		std::string path = d + "/" + name;
		if (access(path.c_str(), R_OK) == 0)
			return path;
	}
	return make_error(ErrorKind::NotFound,
			  "built-in " + name + " not found (looked in " + dirs[0] + " and " + dirs[1] +
				  "); reinstall eacgm");
}

Result<SpecSet> load_builtin_spec(const std::string &layer)
{
	auto path = find_builtin_file(layer + ".json");
	if (!path)
		return with_context(path.error(), "no built-in spec for layer '" + layer + "': ");
	return load_spec_file(path.value(), false);
}

Result<SpecSet> load_layer_specs(const std::vector<std::string> &chosen, LayerTable table,
				 const std::function<Result<SpecSet>(const std::string &)> &load)
{
	SpecSet all;
	for (const Layer &l : table) {
		if (l.source != Source::spec || std::find(chosen.begin(), chosen.end(), l.name) == chosen.end())
			continue;
		auto s = load(std::string(l.name));
		if (!s)
			return s.error();
		all.merge(std::move(s.value()));
	}
	return all;
}

Result<eacgm_probe_spec> compile_probe(const ProbeSpec &p)
{
	eacgm_probe_spec s{};
	s.flags = takes_python_stack(p.layer) ? 0 : EACGM_PROBE_NO_PY_STACK;
	uint32_t n = 0;
	for (auto &a : p.args) {
		for (int k = 0; k < arg_width(a); k++) {
			if (n >= EACGM_MAX_ARGS)
				return make_error(ErrorKind::BadInput,
						  p.origin + ": probe '" + p.function + "' keeps more than " +
							  std::to_string(EACGM_MAX_ARGS) +
							  " argument slots (a dim3 takes two); keep fewer");
			s.args[n].source = a.source;
			s.args[n].slot = a.slot + k;
			s.args[n].offset = a.offset;
			s.args[n].offset2 = a.offset2;
			if (a.type == ArgType::Tensor) { // one slot read twice
				s.args[n].source = a.tensor_list ? (k == 0 ? EACGM_ARG_TENSORS_A : EACGM_ARG_TENSORS_B)
								 : (k == 0 ? EACGM_ARG_TENSOR_A : EACGM_ARG_TENSOR_B);
				s.args[n].slot = a.slot;
				s.args[n].offset2 = a.offset2;
			}
			n++;
		}
	}
	s.nargs = n;
	return s;
}

ProbeSpec expand_match(const ProbeSpec &pattern, const std::string &raw, const std::string &demangled)
{
	ProbeSpec p = pattern;
	p.match.clear();
	p.symbols = {raw};
	std::smatch m;
	std::regex re(pattern.match);
	if (!std::regex_search(demangled, m, re))
		return p;
	std::string name;
	for (size_t i = 0; i < pattern.function.size(); i++) {
		char c = pattern.function[i];
		if (c == '$' && i + 1 < pattern.function.size() && isdigit((unsigned char)pattern.function[i + 1])) {
			size_t g = pattern.function[++i] - '0';
			name += g < m.size() ? m[g].str() : "";
		} else {
			name += c;
		}
	}
	p.function = name;
	return p;
}

bool library_matches(const ProbeSpec &p, const std::string &path) { return library_matches(p.library, path); }

bool library_matches(const std::string &library, const std::string &path)
{
	if (!library.empty() && library[0] == '/')
		return library == path;
	std::string base = path.substr(path.rfind('/') + 1);
	return fnmatch(library.c_str(), base.c_str(), 0) == 0;
}

std::vector<std::string> distinct_libraries(const std::vector<ProbeSpec> &probes)
{
	std::set<std::string> distinct;
	for (auto &p : probes)
		distinct.insert(p.library);
	return {distinct.begin(), distinct.end()};
}

bool any_library_matches(const std::vector<std::string> &libraries, const std::string &path)
{
	for (auto &lib : libraries)
		if (library_matches(lib, path))
			return true;
	return false;
}

std::string anchored_literal_prefix(const std::string &re)
{
	if (re.empty() || re[0] != '^')
		return "";
	// A '|' outside any group makes the anchor apply to one alternative only.
	int depth = 0;
	bool in_class = false;
	for (size_t i = 1; i < re.size(); i++) {
		char c = re[i];
		if (c == '\\') {
			i++;
			continue;
		}
		if (in_class) {
			in_class = c != ']';
			continue;
		}
		if (c == '[')
			in_class = true;
		else if (c == '(')
			depth++;
		else if (c == ')')
			depth--;
		else if (c == '|' && depth == 0)
			return "";
	}
	std::string out;
	for (size_t i = 1; i < re.size(); i++) {
		char c = re[i];
		if (std::string_view(".[]()*+?{}|\\^$").find(c) != std::string_view::npos)
			break;
		out += c;
	}
	// A quantifier binds to the character before it: "^ab*" promises "a" only.
	if (out.size() + 1 < re.size() && std::string_view("*+?{").find(re[out.size() + 1]) != std::string_view::npos &&
	    !out.empty())
		out.pop_back();
	return out;
}

} // namespace eacgm
