// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "pipeline/decode.h"
#include "probe/elf_symbols.h"
#include "probe/spec.h"
#include "probe/symbolizer.h"

namespace symtest {
// Non-static and noinline so it has its own symbol; the body keeps it longer
// than one byte so "+0x1" is still inside it.
__attribute__((noinline)) int symbolizer_target(int x)
{
	volatile int v = x;
	return v * 3 + 1;
}
} // namespace symtest

namespace eacgm {
namespace {

namespace fs = std::filesystem;

const std::string kTarget = "symtest::symbolizer_target(int)";
uint64_t target_addr() { return reinterpret_cast<uint64_t>(&symtest::symbolizer_target); }

// Resolving our own code needs our own symbols: skip in a stripped build.
#define REQUIRE_OWN_SYMBOLS()                                                                                          \
	if (auto self = ElfFile::open("/proc/self/exe"); !self || !self->find("_ZN7symtest17symbolizer_targetEi"))     \
	GTEST_SKIP() << "the test binary is stripped"

std::string own_maps()
{
	std::ifstream in("/proc/self/maps");
	std::stringstream ss;
	ss << in.rdbuf();
	return ss.str();
}

// This process's maps without the test binary's own lines: a process that
// has not mapped (or no longer maps) the code being resolved.
std::string own_maps_without_exe()
{
	const std::string exe = fs::read_symlink("/proc/self/exe").string();
	std::string out, line;
	std::istringstream all(own_maps());
	while (std::getline(all, line))
		if (!line.ends_with(" " + exe))
			out += line + "\n";
	return out;
}

struct FakeProc {
	fs::path root;
	FakeProc()
	{
		char tmpl[] = "/tmp/eacgm_sym_XXXXXX";
		root = mkdtemp(tmpl);
	}
	~FakeProc() { fs::remove_all(root); }
	void write_maps(uint32_t pid, const std::string &maps) const
	{
		fs::create_directories(root / std::to_string(pid));
		std::ofstream(root / std::to_string(pid) / "maps") << maps;
	}
	void exit(uint32_t pid) const { fs::remove_all(root / std::to_string(pid)); }
};

TEST(Symbolizer, ResolvesOwnFunction)
{
	REQUIRE_OWN_SYMBOLS();
	Symbolizer s;
	EXPECT_EQ(s.resolve(getpid(), target_addr()), kTarget);
	EXPECT_EQ(s.resolve(getpid(), target_addr() + 1), kTarget + "+0x1");
	EXPECT_EQ(s.resolve(getpid(), target_addr()), kTarget); // cached
	EXPECT_EQ(s.resolve(getpid(), 0), std::nullopt);
	auto heap = std::make_unique<int>(1); // anonymous memory: no file, no name
	EXPECT_EQ(s.resolve(getpid(), reinterpret_cast<uint64_t>(heap.get())), std::nullopt);
	EXPECT_EQ(s.resolve(2147483647u, target_addr()), std::nullopt);
}

TEST(Symbolizer, SnapshotInheritForget)
{
	REQUIRE_OWN_SYMBOLS();
	FakeProc p;
	Symbolizer s(p.root.string());
	Interner names; // the kernel names the spans carry
	p.write_maps(100, own_maps());
	s.snapshot(100);
	p.exit(100); // gone from /proc, but the snapshot still resolves it
	EXPECT_EQ(s.resolve(100, target_addr()), kTarget);

	s.inherit(101, 100); // forked child that exited before its first event
	EXPECT_EQ(s.resolve(101, target_addr() + 2), kTarget + "+0x2");

	s.forget(100);
	EXPECT_EQ(s.resolve(100, target_addr() + 1), std::nullopt);
	EXPECT_EQ(s.resolve(101, target_addr() + 1), kTarget + "+0x1"); // the child keeps its copy
	s.forget(101);
	EXPECT_EQ(s.resolve(101, target_addr() + 3), std::nullopt);
}

// A handle a library made for a function resolves to that function's name in
// the process that got it, from the moment the alias is known: a miss cached
// before does not stick. A fork keeps it; an exec forgets it.
TEST(Symbolizer, AliasStandsForItsFunction)
{
	REQUIRE_OWN_SYMBOLS();
	FakeProc p;
	Symbolizer s(p.root.string());
	Interner names; // the kernel names the spans carry
	p.write_maps(400, own_maps());
	const uint64_t handle = 0x5a5a0000;
	EXPECT_EQ(s.resolve(400, handle), std::nullopt); // no file there
	s.alias(400, handle, target_addr());
	EXPECT_EQ(s.resolve(400, handle), kTarget);
	EXPECT_EQ(s.resolve(401, handle), std::nullopt); // another process's handle
	s.inherit(402, 400);
	EXPECT_EQ(s.resolve(402, handle), kTarget);
	s.exec(400);
	EXPECT_EQ(s.resolve(400, handle), std::nullopt);
}

// The built-in CUDA spec, decoded as eacgm records it: CUDA 12+ host code
// asks __cudaGetKernel for a handle to its kernel's stub once, then launches
// by that handle, which names the kernel from then on. Without a driver the
// call fails and leaves the stub itself as the handle (no alias is needed).
TEST(Symbolizer, CudaLaunchByHandleIsNamedAfterItsStub)
{
	REQUIRE_OWN_SYMBOLS();
	auto spec = load_builtin_spec("cuda");
	ASSERT_TRUE(spec.ok()) << spec.error().message;
	auto probe = [&](const std::string &name) -> const ProbeSpec & {
		for (auto &p : spec->probes)
			if (p.function == name)
				return p;
		throw std::runtime_error(name + " is not in the cuda spec");
	};
	FakeProc p;
	Symbolizer s(p.root.string());
	Interner names; // the kernel names the spans carry
	p.write_maps(500, own_maps());
	const uint64_t handle = 0x7e57000;
	eacgm_span_event get{};
	get.tgid = get.tid = 500;
	get.args[0] = handle; // *kernelPtr, read at return
	get.args[1] = target_addr();
	Span g = decode_span(get, probe("cudaGetKernel"), spec.value(), &s, names);
	EXPECT_EQ(g.args["kernel"], kTarget);
	EXPECT_EQ(g.args["handle"], "0x7e57000");
	eacgm_span_event launch{};
	launch.tgid = launch.tid = 500;
	launch.args[0] = handle;
	EXPECT_EQ(decode_span(launch, probe("cudaLaunchKernel"), spec.value(), &s, names).args["kernel"], kTarget);

	get.tgid = get.tid = 501; // no driver: the handle is the stub
	p.write_maps(501, own_maps());
	get.args[0] = get.args[1];
	get.ret = 35;
	EXPECT_EQ(decode_span(get, probe("cudaGetKernel"), spec.value(), &s, names).ret_name,
		  "cudaErrorInsufficientDriver");
	launch.tgid = launch.tid = 501;
	launch.args[0] = target_addr();
	EXPECT_EQ(decode_span(launch, probe("cudaLaunchKernel"), spec.value(), &s, names).args["kernel"], kTarget);
	launch.args[0] = handle; // not this process's
	EXPECT_EQ(decode_span(launch, probe("cudaLaunchKernel"), spec.value(), &s, names).args["kernel"], "0x7e57000");
}

// A library loaded after the maps were read: the first miss re-reads them.
TEST(Symbolizer, RereadsMapsOnMiss)
{
	REQUIRE_OWN_SYMBOLS();
	const std::string without_exe = own_maps_without_exe();

	FakeProc p;
	Symbolizer s(p.root.string());
	Interner names; // the kernel names the spans carry
	p.write_maps(200, without_exe);
	void *libc_fn = dlsym(RTLD_DEFAULT, "getpid");
	ASSERT_NE(libc_fn, nullptr);
	EXPECT_TRUE(s.resolve(200, reinterpret_cast<uint64_t>(libc_fn)).has_value()); // first read
	p.write_maps(200, own_maps());
	EXPECT_EQ(s.resolve(200, target_addr()), kTarget);

	// A miss is cached (no re-read per event) until a snapshot, e.g. on exec.
	p.write_maps(201, without_exe);
	EXPECT_TRUE(s.resolve(201, reinterpret_cast<uint64_t>(libc_fn)).has_value()); // first read
	EXPECT_EQ(s.resolve(201, target_addr()), std::nullopt);                       // re-read, still absent
	p.write_maps(201, own_maps());
	EXPECT_EQ(s.resolve(201, target_addr()), std::nullopt); // cached miss
	s.snapshot(201);
	EXPECT_EQ(s.resolve(201, target_addr()), kTarget);
}

// A forked child read while it exits shows part of its maps (the kernel
// unmaps as it goes): what the read lacks resolves through the parent's
// maps, until the child execs. Seen when eacgm was busy at start: the kernel
// name of a child's cudaLaunchKernel came out as an address.
TEST(Symbolizer, ChildReadWhileExitingFallsBackToItsParent)
{
	REQUIRE_OWN_SYMBOLS();
	const std::string without_exe = own_maps_without_exe();
	FakeProc p;
	Symbolizer s(p.root.string());
	Interner names; // the kernel names the spans carry
	p.write_maps(300, own_maps());
	p.write_maps(301, without_exe); // the child, half unmapped
	s.snapshot(301);                // its first span came before its fork record
	s.inherit(301, 300);
	EXPECT_EQ(s.resolve(301, target_addr()), kTarget);
	s.exec(301);
	s.snapshot(301); // a new image: the parent's maps no longer stand in
	EXPECT_EQ(s.resolve(301, target_addr() + 1), std::nullopt);
}

// A child forked right after its parent's exec, before eacgm rescanned the
// parent, inherits the new image's maps, not those read before the exec (a
// launched command is first seen at the gate, still running eacgm's image).
TEST(Symbolizer, ChildOfAnExecInheritsTheNewImage)
{
	REQUIRE_OWN_SYMBOLS();
	const std::string without_exe = own_maps_without_exe();
	FakeProc p;
	Symbolizer s(p.root.string());
	Interner names;                 // the kernel names the spans carry
	p.write_maps(400, without_exe); // before the exec
	s.snapshot(400);
	p.write_maps(400, own_maps()); // after it
	s.exec(400);
	s.inherit(401, 400); // the child exited before it was ever read
	EXPECT_EQ(s.resolve(401, target_addr()), kTarget);
}

} // namespace
} // namespace eacgm
