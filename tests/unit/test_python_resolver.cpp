// SPDX-License-Identifier: Apache-2.0
// Python frames resolved from real interpreters' memory: each installed
// CPython 3.8-3.13 runs tests/testprogs/py_frames.py, which reports its
// frames' code addresses and raw instruction fields; the resolver must name
// every one exactly as the interpreter does (co_qualname, co_filename,
// f_lineno). Then the failure paths: exited process, garbage addresses,
// a code object replaced at the same address, corrupt memory.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "layers/python_resolver.h"

extern char **environ;

namespace eacgm {
namespace {

using nlohmann::json;

const std::string kScript = SOURCE_DIR "/tests/testprogs/py_frames.py";

PyOffsets offsets(const std::string &version)
{
	auto t = load_python_offsets();
	EXPECT_TRUE(t.ok()) << t.error().message;
	EXPECT_TRUE(t.ok() && t->count(version)) << version;
	return t.ok() && t->count(version) ? t->at(version) : PyOffsets{};
}

// A child with its stdin and stdout on pipes.
struct Child {
	pid_t pid = -1;
	int in = -1, out = -1;

	explicit Child(std::vector<std::string> argv)
	{
		int to[2], from[2];
		if (pipe2(to, O_CLOEXEC) || pipe2(from, O_CLOEXEC))
			return;
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, to[0], 0);
		posix_spawn_file_actions_adddup2(&fa, from[1], 1);
		std::vector<char *> args;
		for (auto &a : argv)
			args.push_back(a.data());
		args.push_back(nullptr);
		if (posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ))
			pid = -1;
		posix_spawn_file_actions_destroy(&fa);
		close(to[0]);
		close(from[1]);
		in = to[1];
		out = from[0];
	}
	// One line, or "" after a timeout or end of file.
	std::string read_line(int timeout_ms = 30000)
	{
		std::string s;
		char c;
		pollfd p{out, POLLIN, 0};
		while (poll(&p, 1, timeout_ms) == 1 && read(out, &c, 1) == 1 && c != '\n')
			s += c;
		return s;
	}
	int finish()
	{
		int status = -1;
		if (in >= 0)
			close(in), in = -1;
		if (pid > 0)
			waitpid(pid, &status, 0), pid = -1;
		if (out >= 0)
			close(out), out = -1;
		return status;
	}
	~Child()
	{
		if (pid > 0)
			kill(pid, SIGKILL);
		finish();
	}
};

struct Interpreter {
	const char *name, *path, *version;
};
void PrintTo(const Interpreter &py, std::ostream *os) { *os << py.path; }

class PythonResolverReal : public testing::TestWithParam<Interpreter> {};

TEST_P(PythonResolverReal, ResolvesEveryFrameOfALiveInterpreter)
{
	const Interpreter &py = GetParam();
	if (access(py.path, X_OK) != 0)
		GTEST_SKIP() << py.path << " is not installed";
	PyOffsets o = offsets(py.version);
	ASSERT_EQ(std::to_string(o.major) + "." + std::to_string(o.minor), py.version);

	Child child({py.path, kScript, std::to_string(o.frame_instr)});
	ASSERT_GT(child.pid, 0);
	std::string line = child.read_line();
	ASSERT_FALSE(line.empty()) << py.path << " printed nothing";
	json j = json::parse(line);
	ASSERT_EQ(j["version"], py.version);
	uint32_t pid = child.pid;

	json frames = j["frames"];
	frames.push_back(j["unstarted"]);
	PythonResolver r;
	std::vector<std::string> names;
	for (int pass = 0; pass < 2; pass++) { // the second from the cache
		for (auto &f : frames) {
			uint64_t code = f["code"], raw = f["raw"];
			int64_t lasti = f["lasti"];
			SCOPED_TRACE(f.dump());
			// The raw field's meaning (what the walker reads), against the
			// interpreter's own f_lasti in bytes.
			EXPECT_EQ(instr_byte_offset(o, code, raw), std::optional<int64_t>(lasti < 0 ? -1 : lasti));
			auto info = r.resolve(pid, o, code, raw);
			ASSERT_TRUE(info.has_value());
			EXPECT_EQ(info->qualname, f["qualname"].get<std::string>());
			EXPECT_EQ(info->filename, f["filename"].get<std::string>());
			EXPECT_EQ(info->line, f["line"].get<int>());
			EXPECT_EQ(info->first_line, f["first_line"].get<int>());
			if (pass == 0)
				names.push_back(info->qualname);
		}
	}
	EXPECT_EQ(r.stats().misses, frames.size());
	EXPECT_EQ(r.stats().hits, frames.size());
	EXPECT_EQ(r.stats().failures, 0u);

	// Independently of what the script says: the names of the chain.
	bool qual = o.minor >= 11; // co_qualname exists since 3.11
	std::vector<std::string> want = {"far",
					 qual ? "Outer.method" : "method",
					 qual ? "outer.<locals>.inner" : "inner",
					 "outer",
					 "naïve",
					 "καλημέρα",
					 "𠀀",
					 "<module>",
					 "gen"};
	EXPECT_EQ(names, want);
	EXPECT_EQ(frames[1]["filename"], kScript);
	EXPECT_EQ(frames[0]["filename"], "<generated>");
	EXPECT_EQ(frames[0]["line"], 302); // far's call, 301 lines after its def

	// Not a code object (a function), unmapped, null: nothing, no crash.
	EXPECT_FALSE(r.resolve(pid, o, j["not_code"].get<uint64_t>(), 0));
	EXPECT_FALSE(r.resolve(pid, o, 0xdead0000beefull, 0));
	EXPECT_FALSE(r.resolve(pid, o, 0, 0));
	EXPECT_FALSE(r.resolve(pid, o, j["not_code"].get<uint64_t>() + 3, 0));

	EXPECT_EQ(child.finish(), 0);
	// Exited: a dead process's memory cannot change, so what was cached
	// still answers (its last samples arrive after it is gone); nothing
	// else does.
	uint64_t code = frames[0]["code"], raw = frames[0]["raw"];
	auto cached = r.resolve(pid, o, code, raw);
	ASSERT_TRUE(cached);
	EXPECT_EQ(cached->filename, "<generated>");
	EXPECT_EQ(cached->line, 302);
	EXPECT_FALSE(r.resolve(pid, o, code, raw, /*name_ptr=*/1)); // not the object the walker saw
	PythonResolver fresh;
	EXPECT_FALSE(fresh.resolve(pid, o, code, raw));
	std::cout << "[ python   ] " << py.path << " (" << py.version << "): " << frames.size() << " frames resolved\n";
}

const Interpreter kInterpreters[] = {
	{"pyenv_3_8", "/root/.pyenv/versions/3.8.18/bin/python3.8", "3.8"},
	{"pyenv_3_9", "/root/.pyenv/versions/3.9.18/bin/python3.9", "3.9"},
	{"pyenv_3_10", "/root/.pyenv/versions/3.10.13/bin/python3.10", "3.10"},
	{"pyenv_3_11", "/root/.pyenv/versions/3.11.7/bin/python3.11", "3.11"},
	{"pyenv_3_12", "/root/.pyenv/versions/3.12.1/bin/python3.12", "3.12"},
	{"pyenv_3_13", "/root/.pyenv/versions/3.13.0/bin/python3.13", "3.13"},
	{"debian_3_11", "/usr/bin/python3.11", "3.11"},
};
INSTANTIATE_TEST_SUITE_P(Interpreters, PythonResolverReal, testing::ValuesIn(kInterpreters),
			 [](const auto &info) { return std::string(info.param.name); });

// --- objects built in this process, read back through process_vm_readv ---

// A 3.12 code object with its strings, line table and type objects.
struct FakeCode {
	PyOffsets o;
	alignas(8) uint8_t code_type[256] = {}, str_type[256] = {}, bytes_type[256] = {};
	alignas(8) uint8_t code[256] = {}, name[64] = {}, file[128] = {}, table1[64] = {}, table2[64] = {};

	template <class T>
	static void put(uint8_t *obj, size_t off, T v)
	{
		memcpy(obj + off, &v, sizeof v);
	}
	static uint64_t addr(const void *p) { return reinterpret_cast<uint64_t>(p); }
	void str(uint8_t *obj, const char *s)
	{
		put(obj, 8, addr(str_type));
		put<int64_t>(obj, 16, strlen(s));
		put<uint32_t>(obj, 32, 1 << 2 | 1 << 5 | 1 << 6); // kind 1, compact, ascii
		strcpy(reinterpret_cast<char *>(obj + o.unicode_ascii_data), s);
	}
	void bytes(uint8_t *obj, std::vector<uint8_t> b)
	{
		put(obj, 8, addr(bytes_type));
		put<int64_t>(obj, o.bytes_size, b.size());
		memcpy(obj + o.bytes_data, b.data(), b.size());
	}
	FakeCode() : o(offsets("3.12"))
	{
		put(code_type, 24, addr("code"));
		put(str_type, 24, addr("str"));
		put(bytes_type, 24, addr("bytes"));
		str(name, "Fake.run");
		str(file, "/src/fake.py");
		// Location entries, "no columns" kind with an svarint line delta:
		// table1 puts offsets 0-3 on first line, 4-7 on +2; table2 on +5, +6.
		bytes(table1, {0x80 | 13 << 3 | 1, 0x00, 0x80 | 13 << 3 | 1, 0x04});
		bytes(table2, {0x80 | 13 << 3 | 1, 0x0a, 0x80 | 13 << 3 | 1, 0x02});
		put(code, 8, addr(code_type));
		put(code, o.code_filename, addr(file));
		put(code, o.code_name, addr(name));
		put(code, o.code_qualname, addr(name));
		put(code, o.code_linetable, addr(table1));
		put<int32_t>(code, o.code_firstlineno, 10);
	}
	uint64_t instr(int64_t byte_offset) { return addr(code) + o.code_adaptive + byte_offset; }
};

TEST(PythonResolver, NoticesACodeObjectReplacedAtTheSameAddress)
{
	FakeCode f;
	PythonResolver r;
	uint32_t self = getpid();
	auto info = r.resolve(self, f.o, FakeCode::addr(f.code), f.instr(4));
	ASSERT_TRUE(info);
	EXPECT_EQ(info->qualname, "Fake.run");
	EXPECT_EQ(info->filename, "/src/fake.py");
	EXPECT_EQ(info->line, 12);
	EXPECT_EQ(r.resolve(self, f.o, FakeCode::addr(f.code), f.instr(0))->line, 10);
	EXPECT_EQ(r.stats().hits, 1u);

	// Freed and reallocated: another line table, then another first line.
	FakeCode::put(f.code, f.o.code_linetable, FakeCode::addr(f.table2));
	EXPECT_EQ(r.resolve(self, f.o, FakeCode::addr(f.code), f.instr(4))->line, 16);
	FakeCode::put<int32_t>(f.code, f.o.code_firstlineno, 20);
	EXPECT_EQ(r.resolve(self, f.o, FakeCode::addr(f.code), f.instr(4))->line, 26);
	EXPECT_EQ(r.resolve(self, f.o, FakeCode::addr(f.code), f.instr(-2))->line, 20); // not started
	EXPECT_EQ(r.resolve(self, f.o, FakeCode::addr(f.code), f.instr(8))->line, 0);   // past the table
	EXPECT_EQ(r.resolve(self, f.o, FakeCode::addr(f.code), 12345)->line, 0);        // not a pointer into it
	EXPECT_EQ(r.stats().stale, 2u);

	// Not a code object any more.
	FakeCode::put(f.code, 8, FakeCode::addr(f.str_type));
	EXPECT_FALSE(r.resolve(self, f.o, FakeCode::addr(f.code), f.instr(4)));
	r.forget(self);
	EXPECT_FALSE(r.resolve(self, f.o, FakeCode::addr(f.code), f.instr(4)));
}

TEST(PythonResolver, AnObjectFreedAfterTheWalkIsNamedFromTheCacheWhenTheWalkerSawItsNames)
{
	FakeCode f;
	PythonResolver r;
	uint32_t self = getpid();
	uint64_t code = FakeCode::addr(f.code), name = FakeCode::addr(f.name), file = FakeCode::addr(f.file);
	ASSERT_TRUE(r.resolve(self, f.o, code, f.instr(4), name, file)); // cached while alive
	// Freed (malloc's free list pointers over its header) before a late
	// stack that walked it, with its names, is read.
	FakeCode::put(f.code, 0, uint64_t(0x1234560));
	FakeCode::put(f.code, 8, uint64_t(0x1234570));
	auto late = r.resolve(self, f.o, code, f.instr(4), name, file);
	ASSERT_TRUE(late);
	EXPECT_EQ(late->qualname, "Fake.run");
	EXPECT_EQ(late->line, 12);
	// Another file seen by the walker: another object was there; not named.
	EXPECT_FALSE(r.resolve(self, f.o, code, f.instr(4), name, file + 8));
	// Without the walker's names there is nothing to go by.
	EXPECT_FALSE(r.resolve(self, f.o, code, f.instr(4)));
}

TEST(PythonResolver, StringsOfEveryKindBecomeUtf8)
{
	FakeCode f;
	// "é€😀" as a 4-byte-kind compact string: data after PyCompactUnicodeObject.
	alignas(8) uint8_t s[128] = {};
	FakeCode::put(s, 8, FakeCode::addr(f.str_type));
	FakeCode::put<int64_t>(s, 16, 3);
	FakeCode::put<uint32_t>(s, 32, 4 << 2 | 1 << 5);
	uint32_t chars[] = {0xe9, 0x20ac, 0x1f600};
	memcpy(s + f.o.unicode_ascii_data + 16, chars, sizeof chars);
	FakeCode::put(f.code, f.o.code_qualname, FakeCode::addr(s));
	PythonResolver r;
	auto info = r.resolve(getpid(), f.o, FakeCode::addr(f.code), f.instr(0));
	ASSERT_TRUE(info);
	EXPECT_EQ(info->qualname, "é€😀");
	// Legacy (not compact) strings are reported as "?".
	FakeCode::put<uint32_t>(s, 32, 4 << 2);
	FakeCode::put<int32_t>(f.code, f.o.code_firstlineno, 11); // a new identity
	EXPECT_EQ(r.resolve(getpid(), f.o, FakeCode::addr(f.code), f.instr(0))->qualname, "?");
}

TEST(PythonResolver, CorruptMemoryNeverCrashes)
{
	// Random bytes flipped anywhere in the objects, pointers included (a bad
	// pointer makes process_vm_readv fail, not us).
	FakeCode f;
	std::mt19937_64 rng(7);
	uint8_t *objs[] = {f.code, f.name, f.file, f.table1};
	size_t sizes[] = {sizeof f.code, sizeof f.name, sizeof f.file, sizeof f.table1};
	PythonResolver r;
	int answered = 0;
	for (int i = 0; i < 20000; i++) {
		int k = rng() % 4;
		objs[k][rng() % sizes[k]] = uint8_t(rng());
		answered += r.resolve(getpid(), f.o, FakeCode::addr(f.code), f.instr(rng() % 64 - 8)).has_value();
	}
	EXPECT_EQ(r.stats().lookups, 20000u);
	EXPECT_EQ(answered + r.stats().failures, r.stats().lookups); // every nullopt counted
	// A reader that returns noise: every lookup fails cleanly.
	PythonResolver noise([&](uint32_t, uint64_t, void *dst, size_t len) {
		for (size_t j = 0; j < len; j++)
			static_cast<uint8_t *>(dst)[j] = uint8_t(rng());
		return true;
	});
	for (int i = 0; i < 2000; i++)
		EXPECT_FALSE(noise.resolve(1, f.o, rng() | 8, rng()));
}

TEST(PythonResolver, LineTableDecodersAreBoundedOnGarbage)
{
	std::mt19937 rng(1);
	for (int i = 0; i < 2000; i++) {
		std::vector<uint8_t> t(rng() % 300);
		for (auto &b : t)
			b = uint8_t(rng());
		for (auto *decode : {decode_lnotab, decode_linetable310, decode_locations}) {
			auto ranges = decode(t.data(), t.size(), 1);
			for (size_t k = 1; k < ranges.size(); k++)
				ASSERT_LE(ranges[k - 1].end, ranges[k].start);
			(void)line_at(ranges, int64_t(rng() % 4000), 1);
		}
	}
	// The unsupported: a version outside 3.8-3.13, an empty table.
	PyOffsets o = offsets("3.12");
	o.minor = 14;
	PythonResolver r;
	EXPECT_FALSE(r.resolve(getpid(), o, 0x1000, 0));
	EXPECT_FALSE(r.resolve(getpid(), PyOffsets{}, 0x1000, 0));
}

} // namespace
} // namespace eacgm
