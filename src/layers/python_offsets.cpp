// SPDX-License-Identifier: Apache-2.0
#include "layers/python_offsets.h"

#include "probe/spec.h"

#include <algorithm>
#include <cstring>
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
		return make_error(ErrorKind::BadInput, where + ": a version key is \"3.MINOR\", such as \"3.11\"");
	if (!j.is_object())
		return make_error(ErrorKind::BadInput, where + ": must be an object of \"field\": offset");
	PyOffsets o;
	o.major = 3;
	o.minor = std::stoi(m[1].str());
	for (auto &[k, v] : j.items()) {
		auto f = std::find_if(std::begin(kPyOffsetFields), std::end(kPyOffsetFields),
				      // Through an init-capture: clang before 16 cannot capture a
				      // structured binding (C++20 allows it).
				      [&key = k](auto &p) { return key == p.first; });
		if (f == std::end(kPyOffsetFields)) {
			std::string list;
			for (auto &p : kPyOffsetFields)
				list += std::string(list.empty() ? "" : ", ") + p.first;
			return make_error(ErrorKind::BadInput,
					  where + ": unknown field \"" + k + "\" (known: " + list + ")");
		}
		// kNoOffset marks an absent field: leave the field out instead.
		if (!v.is_number_unsigned() || v.get<uint64_t>() >= kNoOffset)
			return make_error(ErrorKind::BadInput,
					  where + ": \"" + k + "\" must be a byte offset 0.." +
						  std::to_string(kNoOffset - 1) +
						  " (leave out fields the version lacks)");
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
		return make_error(ErrorKind::BadInput, origin + ": JSON syntax error: " + e.what());
	}
	if (!doc.is_object())
		return make_error(ErrorKind::BadInput,
				  origin + ": expected {\"versions\": {\"3.11\": {...}}} or {\"3.11\": {...}}");
	// tools/pyoffsets.c's marker when an interpreter's headers did not compile.
	if (doc.contains("error"))
		return make_error(ErrorKind::BadInput,
				  origin + ": " +
					  (doc["error"].is_string() ? doc["error"].get<std::string>() : doc.dump()));
	// Two forms: the table (specs/python.json) and one measurement (the tool's
	// output, the versions at the top level).
	const json *versions = &doc;
	if (doc.contains("versions")) {
		for (auto &[k, v] : doc.items())
			if (k != "about" && k != "versions")
				return make_error(ErrorKind::BadInput,
						  origin + ": unknown key \"" + k + "\" (known: about, versions)");
		versions = &doc["versions"];
		if (!versions->is_object())
			return make_error(ErrorKind::BadInput,
					  origin + ": \"versions\" must map \"3.MINOR\" to offsets");
	}
	std::map<std::string, PyOffsets> out;
	for (auto &[k, v] : versions->items()) {
		auto o = parse_version(k, v, origin);
		if (!o)
			return o.error();
		out[k] = o.value();
	}
	if (out.empty())
		return make_error(ErrorKind::BadInput, origin + ": no versions");
	return out;
}

PyOffsets debug_offset_positions(int minor)
{
	PyOffsets p;
	p.minor = minor;
	if (minor < 13)
		return p;
	// 3.13's struct _Py_DebugOffsets (Include/internal/pycore_runtime.h): a
	// cookie, version and free_threaded, then groups of uint64 offsets, each
	// group starting with the struct's size. A test reads a live 3.13 through
	// these and compares with the table measured from its headers.
	p.runtime_interpreters_head = 40; // runtime_state @24: size, finalizing, interpreters_head
	p.interp_threads_head = 72;       // interpreter_state @48: size, id, next, threads_head
	p.tstate_next = 168;              // thread_state @152: size, prev, next, interp,
	p.tstate_frame = 184;             //   current_frame,
	p.tstate_thread_id = 192;         //   thread_id,
	p.tstate_native_thread_id = 200;  //   native_thread_id
	p.frame_previous = 232;           // interpreter_frame @224: size, previous,
	p.frame_code = 240;               //   executable,
	p.frame_instr = 248;              //   instr_ptr, localsplus,
	p.frame_owner = 264;              //   owner
	p.code_filename = 280;            // code_object @272: size, filename,
	p.code_name = 288;                //   name,
	p.code_qualname = 296;            //   qualname,
	p.code_linetable = 304;           //   linetable,
	p.code_firstlineno = 312;         //   firstlineno, argcount, localsplusnames, localspluskinds,
	p.code_adaptive = 344;            //   co_code_adaptive
	p.bytes_size = 520;               // bytes_object @512: size, ob_size,
	p.bytes_data = 528;               //   ob_sval
	p.unicode_ascii_data = 560;       // unicode_object @536: size, state, length, asciiobject_size
	return p;
}

Result<CheckedOffsets> check_debug_offsets(const PyOffsets &table, const uint8_t *image, size_t len)
{
	if (len < kDebugOffsetsBytes || std::memcmp(image, "xdebugpy", 8) != 0)
		return make_error(ErrorKind::BadInput,
				  "_PyRuntime does not start with _Py_DebugOffsets (no \"xdebugpy\" cookie)");
	uint64_t version;
	std::memcpy(&version, image + 8, sizeof version); // PY_VERSION_HEX
	int major = static_cast<int>(version >> 24), minor = static_cast<int>((version >> 16) & 0xff);
	if (major != table.major || minor != table.minor)
		return make_error(ErrorKind::BadInput,
				  "_Py_DebugOffsets says Python " + std::to_string(major) + "." +
					  std::to_string(minor) + ", the library's name says " +
					  std::to_string(table.major) + "." + std::to_string(table.minor));
	PyOffsets pos = debug_offset_positions(minor);
	CheckedOffsets out{table, {}};
	for (auto &[name, field] : kPyOffsetFields) {
		if (pos.*field == kNoOffset || pos.*field + sizeof(uint64_t) > len)
			continue;
		uint64_t v;
		std::memcpy(&v, image + pos.*field, sizeof v);
		if (v >= kNoOffset || v == table.*field)
			continue;
		out.differ.push_back(std::string(name) + ": table " +
				     (table.*field == kNoOffset ? "none" : std::to_string(table.*field)) +
				     ", interpreter " + std::to_string(v));
		out.offsets.*field = static_cast<uint16_t>(v);
	}
	return out;
}

Result<std::map<std::string, PyOffsets>> load_python_offsets()
{
	auto path = find_builtin_file("python.json");
	if (!path)
		return with_context(path.error(), "no CPython offsets table: ");
	std::ifstream in(path.value());
	std::stringstream ss;
	ss << in.rdbuf();
	return parse_python_offsets(ss.str(), path.value());
}

} // namespace eacgm
