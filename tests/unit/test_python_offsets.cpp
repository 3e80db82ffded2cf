// The CPython offsets table (specs/python.json): known values, and equality
// with what tools/pyoffsets.c measured from every installed interpreter's
// headers at build time.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "layers/python_offsets.h"

#ifndef PYTHON_OFFSETS_DIR
#error "tools/CMakeLists.txt defines PYTHON_OFFSETS_DIR for unit_tests"
#endif

namespace eacgm {
namespace {

namespace fs = std::filesystem;


std::map<std::string, PyOffsets> table()
{
	auto t = load_python_offsets();
	EXPECT_TRUE(t.ok()) << t.error().message;
	return t.ok() ? t.value() : std::map<std::string, PyOffsets>{};
}

TEST(PythonOffsets, TableHasEveryVersionWithKnownValues)
{
	auto t = table();
	for (int minor = 8; minor <= 13; minor++) {
		std::string v = "3." + std::to_string(minor);
		ASSERT_TRUE(t.count(v)) << v;
		const PyOffsets &o = t[v];
		EXPECT_EQ(o.major, 3);
		EXPECT_EQ(o.minor, minor);
		// What every version has.
		for (auto f : {&PyOffsets::runtime_interpreters_head, &PyOffsets::interp_threads_head,
			       &PyOffsets::tstate_next, &PyOffsets::tstate_thread_id, &PyOffsets::frame_previous,
			       &PyOffsets::frame_code, &PyOffsets::frame_instr, &PyOffsets::code_filename,
			       &PyOffsets::code_name, &PyOffsets::code_firstlineno, &PyOffsets::code_linetable,
			       &PyOffsets::unicode_ascii_data, &PyOffsets::bytes_size, &PyOffsets::bytes_data})
			EXPECT_NE(o.*f, kNoOffset) << v;
		// The innermost frame is reached one way per version.
		EXPECT_EQ(o.tstate_frame != kNoOffset, minor <= 10 || minor == 13) << v;
		EXPECT_EQ(o.tstate_cframe != kNoOffset, minor == 11 || minor == 12) << v;
		EXPECT_EQ(o.tstate_native_thread_id != kNoOffset, minor >= 11) << v;
		EXPECT_EQ(o.code_qualname != kNoOffset, minor >= 11) << v;
		EXPECT_EQ(o.code_adaptive != kNoOffset, minor >= 11) << v;
		EXPECT_EQ(o.frame_owner != kNoOffset, minor >= 12) << v;
		EXPECT_EQ(o.bytes_size, 16);
		EXPECT_EQ(o.bytes_data, 32);
	}
	// Reported publicly and checked by hand (/work/shared/PYTHON.md).
	const PyOffsets &a = t["3.11"];
	EXPECT_EQ(a.tstate_cframe, 56);
	EXPECT_EQ(a.cframe_current_frame, 8);
	EXPECT_EQ(a.frame_code, 32);
	EXPECT_EQ(a.frame_previous, 48);
	EXPECT_EQ(a.frame_instr, 56);
	EXPECT_EQ(a.tstate_native_thread_id, 160);
	EXPECT_EQ(a.interp_threads_head, 16);
	EXPECT_EQ(a.code_filename, 112);
	EXPECT_EQ(a.code_name, 120);
	EXPECT_EQ(a.code_qualname, 128);
	EXPECT_EQ(a.code_linetable, 136);
	EXPECT_EQ(a.code_firstlineno, 72);
	EXPECT_EQ(a.unicode_ascii_data, 48);
	const PyOffsets &b = t["3.12"];
	EXPECT_EQ(b.tstate_cframe, 56);
	EXPECT_EQ(b.cframe_current_frame, 0);
	EXPECT_EQ(b.frame_code, 0);
	EXPECT_EQ(b.frame_previous, 8);
	EXPECT_EQ(b.frame_owner, 70);
	EXPECT_EQ(b.tstate_native_thread_id, 144);
	EXPECT_EQ(b.interp_threads_head, 72);
	EXPECT_EQ(b.code_filename, 112);
	EXPECT_EQ(b.code_name, 120);
	EXPECT_EQ(b.code_qualname, 128);
	EXPECT_EQ(b.code_firstlineno, 68);
	const PyOffsets &c = t["3.13"];
	EXPECT_EQ(c.tstate_frame, 72);
	EXPECT_EQ(c.frame_code, 0);
	EXPECT_EQ(c.frame_previous, 8);
	EXPECT_EQ(c.frame_owner, 70);
	EXPECT_EQ(c.tstate_native_thread_id, 160);
	EXPECT_EQ(c.interp_threads_head, 7344);
	EXPECT_EQ(c.code_filename, 112);
	EXPECT_EQ(c.code_name, 120);
	EXPECT_EQ(c.code_qualname, 128);
	EXPECT_EQ(c.code_firstlineno, 68);
}

// The interpreters whose headers tools/CMakeLists.txt measures, named as it
// names them: pyenv's by version directory, /usr/include's system-3.N.
std::set<std::string> installed_interpreters()
{
	std::set<std::string> names;
	static const std::regex leaf("python3\\.([0-9]+)");
	auto add = [&](const fs::path &inc, const std::string &name) {
		std::smatch m;
		std::string l = inc.filename().string();
		if (!std::regex_match(l, m, leaf) || !fs::exists(inc / "Python.h") || !fs::is_directory(inc / "internal"))
			return;
		int minor = std::stoi(m[1].str());
		if (minor >= 8 && minor <= 13)
			names.insert(name.empty() ? "system-3." + m[1].str() : name);
	};
	std::error_code ec;
	for (auto &v : fs::directory_iterator("/root/.pyenv/versions", ec))
		for (auto &inc : fs::directory_iterator(v.path() / "include", ec))
			add(inc.path(), v.path().filename().string());
	for (auto &inc : fs::directory_iterator("/usr/include", ec))
		add(inc.path(), "");
	return names;
}

TEST(PythonOffsets, MeasuredHeadersMatchTheTable)
{
	auto t = table();
	std::set<std::string> measured;
	std::error_code ec;
	for (auto &e : fs::directory_iterator(PYTHON_OFFSETS_DIR, ec)) {
		if (e.path().extension() != ".json")
			continue;
		std::string name = e.path().stem().string();
		measured.insert(name);
		std::ifstream in(e.path());
		std::stringstream ss;
		ss << in.rdbuf();
		auto m = parse_python_offsets(ss.str(), e.path().string());
		ASSERT_TRUE(m.ok()) << m.error().message;
		ASSERT_EQ(m->size(), 1u) << name;
		auto &[version, got] = *m->begin();
		ASSERT_TRUE(t.count(version)) << name << " is CPython " << version << ", which specs/python.json lacks";
		const PyOffsets &want = t[version];
		for (auto &[field, member] : kPyOffsetFields)
			EXPECT_EQ(got.*member, want.*member)
				<< name << " (" << version << ") " << field << ": measured vs specs/python.json";
	}
	// An empty directory must not pass for a check.
	for (auto &name : installed_interpreters())
		EXPECT_TRUE(measured.count(name)) << "headers of " << name << " are installed but " PYTHON_OFFSETS_DIR "/"
						  << name << ".json is missing: rebuild (target python_offsets)";
}

TEST(PythonOffsets, ParserReadsBothForms)
{
	auto table = parse_python_offsets(R"({"about": "x", "versions": {"3.10": {"frame_code": 32}}})", "t.json");
	ASSERT_TRUE(table.ok()) << table.error().message;
	const PyOffsets &o = table->at("3.10");
	EXPECT_EQ(o.minor, 10);
	EXPECT_EQ(o.frame_code, 32);
	EXPECT_EQ(o.frame_previous, kNoOffset); // missing stays absent
	auto one = parse_python_offsets(R"({"3.12": {"frame_owner": 70}})", "m.json");
	ASSERT_TRUE(one.ok()) << one.error().message;
	EXPECT_EQ(one->at("3.12").frame_owner, 70);
}

TEST(PythonOffsets, ParserErrorsNameTheFileAndTheProblem)
{
	auto err = [](const std::string &text) {
		auto r = parse_python_offsets(text, "py.json");
		EXPECT_FALSE(r.ok()) << text;
		return r.ok() ? std::string() : r.error().message;
	};
	auto has = [](const std::string &msg, const std::string &part) {
		EXPECT_NE(msg.find("py.json"), std::string::npos) << msg;
		EXPECT_NE(msg.find(part), std::string::npos) << msg;
	};
	has(err("{"), "JSON syntax error");
	has(err("[]"), "expected");
	has(err(R"({"versions": {}})"), "no versions");
	has(err(R"({"versions": {"3.x": {}}})"), "\"3.MINOR\"");
	has(err(R"({"versions": {"2.7": {}}})"), "\"3.MINOR\"");
	has(err(R"({"versions": {"3.11": {"frame_cdoe": 32}}})"), "unknown field \"frame_cdoe\"");
	has(err(R"({"versions": {"3.11": {"frame_code": -1}}})"), "byte offset");
	has(err(R"({"versions": {"3.11": {"frame_code": 65535}}})"), "leave out");
	has(err(R"({"versions": {"3.11": {"frame_code": "32"}}})"), "byte offset");
	has(err(R"({"versions": {"3.11": []}})"), "must be an object");
	has(err(R"({"versoins": {}, "versions": {"3.11": {}}})"), "unknown key \"versoins\"");
	has(err(R"({"error": "tools/pyoffsets.c did not compile"})"), "did not compile");
}

} // namespace
} // namespace eacgm
