#include "layers/python_offsets.h"

#include "probe/spec.h"

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

namespace eacgm {

using nlohmann::json;


static Result<PyOffsets> parse_version(const std::string &version, const json &j, const std::string &origin)
{
	static const std::regex re("3\\.([0-9]{1,2})");
	std::smatch m;
	std::string where = origin + ": version \"" + version + "\"";
	if (!std::regex_match(version, m, re))
		return make_error(where + ": a version key is \"3.MINOR\", such as \"3.11\"");
	if (!j.is_object())
		return make_error(where + ": must be an object of \"field\": offset");
	PyOffsets o;
	o.major = 3;
	o.minor = std::stoi(m[1].str());
	for (auto &[k, v] : j.items()) {
		auto f = std::find_if(std::begin(kPyOffsetFields), std::end(kPyOffsetFields),
				      [&](auto &p) { return k == p.first; });
		if (f == std::end(kPyOffsetFields)) {
			std::string list;
			for (auto &p : kPyOffsetFields)
				list += std::string(list.empty() ? "" : ", ") + p.first;
			return make_error(where + ": unknown field \"" + k + "\" (known: " + list + ")");
		}
		// kNoOffset marks an absent field: leave the field out instead.
		if (!v.is_number_unsigned() || v.get<uint64_t>() >= kNoOffset)
			return make_error(where + ": \"" + k + "\" must be a byte offset 0.." +
					  std::to_string(kNoOffset - 1) + " (leave out fields the version lacks)");
		o.*(f->second) = v.get<uint16_t>();
	}
	return o;
}

Result<std::map<std::string, PyOffsets>> parse_python_offsets(const std::string &json_text, const std::string &origin)
{
	json doc;
	try {
		doc = json::parse(json_text);
	} catch (const json::parse_error &e) {
		return make_error(origin + ": JSON syntax error: " + e.what());
	}
	if (!doc.is_object())
		return make_error(origin + ": expected {\"versions\": {\"3.11\": {...}}} or {\"3.11\": {...}}");
	// tools/pyoffsets.c's marker when an interpreter's headers did not compile.
	if (doc.contains("error"))
		return make_error(origin + ": " + (doc["error"].is_string() ? doc["error"].get<std::string>() : doc.dump()));
	// Two forms: the table (specs/python.json) and one measurement (the tool's
	// output, the versions at the top level).
	const json *versions = &doc;
	if (doc.contains("versions")) {
		for (auto &[k, v] : doc.items())
			if (k != "about" && k != "versions")
				return make_error(origin + ": unknown key \"" + k + "\" (known: about, versions)");
		versions = &doc["versions"];
		if (!versions->is_object())
			return make_error(origin + ": \"versions\" must map \"3.MINOR\" to offsets");
	}
	std::map<std::string, PyOffsets> out;
	for (auto &[k, v] : versions->items()) {
		auto o = parse_version(k, v, origin);
		if (!o)
			return o.error();
		out[k] = o.value();
	}
	if (out.empty())
		return make_error(origin + ": no versions");
	return out;
}

Result<std::map<std::string, PyOffsets>> load_python_offsets()
{
	auto path = find_builtin_file("python.json");
	if (!path)
		return make_error("no CPython offsets table: " + path.error().message);
	std::ifstream in(path.value());
	std::stringstream ss;
	ss << in.rdbuf();
	return parse_python_offsets(ss.str(), path.value());
}

} // namespace eacgm
