// SPDX-License-Identifier: Apache-2.0
// The CPython offsets table (specs/python.json): known values, and equality
// with what tools/pyoffsets.c measured from every installed interpreter's
// headers at build time.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <csignal>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

#include "layers/python.h"
#include "layers/python_offsets.h"
#include "layers/python_resolver.h"

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
		for (auto f :
		     {&PyOffsets::runtime_interpreters_head, &PyOffsets::interp_threads_head, &PyOffsets::tstate_next,
		      &PyOffsets::tstate_thread_id, &PyOffsets::frame_previous, &PyOffsets::frame_code,
		      &PyOffsets::frame_instr, &PyOffsets::frame_globals, &PyOffsets::code_filename,
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
	EXPECT_EQ(a.frame_globals, 8);
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
		if (!std::regex_match(l, m, leaf) || !fs::exists(inc / "Python.h") ||
		    !fs::is_directory(inc / "internal"))
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
		EXPECT_TRUE(measured.count(name))
			<< "headers of " << name << " are installed but " PYTHON_OFFSETS_DIR "/" << name
			<< ".json is missing: rebuild (target python_offsets)";
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
		EXPECT_EQ(r.ok() ? ErrorKind::Other : r.error().kind, ErrorKind::BadInput) << text;
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

namespace eacgm {
namespace {

// A _Py_DebugOffsets image stating the given offsets at 3.13's positions.
std::vector<uint8_t> debug_image(const PyOffsets &o, uint64_t version_hex = 0x030d00f0)
{
	std::vector<uint8_t> image(kDebugOffsetsBytes, 0);
	std::memcpy(image.data(), "xdebugpy", 8);
	std::memcpy(image.data() + 8, &version_hex, 8);
	PyOffsets pos = debug_offset_positions(13);
	for (auto &[name, field] : kPyOffsetFields)
		if (pos.*field != kNoOffset) {
			uint64_t v = o.*field;
			std::memcpy(image.data() + pos.*field, &v, 8);
		}
	return image;
}

TEST(PythonDebugOffsets, AgreeingImageChangesNothing)
{
	PyOffsets t = table()["3.13"];
	auto image = debug_image(t);
	auto c = check_debug_offsets(t, image.data(), image.size());
	ASSERT_TRUE(c.ok()) << c.error().message;
	EXPECT_TRUE(c->differ.empty());
	EXPECT_EQ(c->offsets.tstate_next, t.tstate_next);
}

TEST(PythonDebugOffsets, TheInterpretersOwnValuesWinAndAreNamed)
{
	PyOffsets t = table()["3.13"];
	PyOffsets stated = t;
	stated.tstate_next = 16;
	stated.code_qualname = 136;
	auto image = debug_image(stated);
	auto c = check_debug_offsets(t, image.data(), image.size());
	ASSERT_TRUE(c.ok()) << c.error().message;
	EXPECT_EQ(c->differ,
		  (std::vector<std::string>{"tstate_next: table 8, interpreter 16",
					    "code_qualname: table 128, interpreter 136"}));
	EXPECT_EQ(c->offsets.tstate_next, 16);
	EXPECT_EQ(c->offsets.code_qualname, 136);
	EXPECT_EQ(c->offsets.frame_code, t.frame_code);
}

TEST(PythonDebugOffsets, NotAnImageOrAnotherVersionIsRefused)
{
	PyOffsets t = table()["3.13"];
	auto image = debug_image(t);
	image[0] = 'X';
	auto bad = check_debug_offsets(t, image.data(), image.size());
	ASSERT_FALSE(bad.ok());
	EXPECT_NE(bad.error().message.find("xdebugpy"), std::string::npos) << bad.error().message;
	auto other = debug_image(t, 0x030e00a1);
	auto v = check_debug_offsets(t, other.data(), other.size());
	ASSERT_FALSE(v.ok());
	EXPECT_NE(v.error().message.find("says Python 3.14"), std::string::npos) << v.error().message;
	EXPECT_FALSE(check_debug_offsets(t, image.data(), 100).ok());
}

// A live 3.13 states, at the positions eacgm reads, exactly the offsets its
// headers gave the table: the positions are right.
TEST(PythonDebugOffsets, ALive313AgreesWithTheTable)
{
	const char *py = "/root/.pyenv/versions/3.13.0/bin/python3.13";
	ASSERT_EQ(access(py, X_OK), 0) << py << " is part of this machine's image";
	int fds[2];
	ASSERT_EQ(pipe(fds), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		execl(py, py, "-c", "import time; print(1, flush=True); time.sleep(60)", (char *)nullptr);
		_exit(127);
	}
	close(fds[1]);
	char c;
	ASSERT_EQ(read(fds[0], &c, 1), 1); // running: its runtime is initialised
	auto maps = read_maps(pid);
	ASSERT_TRUE(maps);
	auto rt = find_python_runtime(pid, maps.value());
	std::vector<uint8_t> image(kDebugOffsetsBytes);
	bool found = rt.ok() && rt->has_value();
	bool read_ok = found && read_process_memory(pid, (*rt)->runtime_addr, image.data(), image.size());
	kill(pid, SIGKILL);
	waitpid(pid, nullptr, 0);
	close(fds[0]);
	ASSERT_TRUE(found) << "no libpython with _PyRuntime in the maps of a running " << py;
	ASSERT_TRUE(read_ok) << "cannot read _PyRuntime of a running " << py;
	PyOffsets t = table()["3.13"];
	auto checked = check_debug_offsets(t, image.data(), image.size());
	ASSERT_TRUE(checked.ok()) << checked.error().message;
	EXPECT_EQ(checked->differ, std::vector<std::string>{});
	// And the positions reach real fields, not zeros.
	EXPECT_NE(t.tstate_native_thread_id, 0);
}

} // namespace
} // namespace eacgm
