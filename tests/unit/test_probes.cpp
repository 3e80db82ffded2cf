// SPDX-License-Identifier: Apache-2.0
// eacgm probes: matching, alias grouping, close matches and spec generation
// against real libraries (the NCCL of the CUDA toolkit, the test library).
#include <gtest/gtest.h>
#include <unistd.h>

#include "app/probes.h"
#include "probe/spec.h"

namespace eacgm {
namespace {

const std::string kNccl = "/usr/local/cuda/lib64/libnccl.so.2";
const std::string kTestlib = std::string(TESTPROGS_DIR) + "/libeacgm_testlib.so";

#define REQUIRE_FILE(p)                                                                                                \
	if (access((p).c_str(), R_OK) != 0)                                                                            \
	GTEST_SKIP() << (p) << " is not installed on this machine"

ElfFile open_elf(const std::string &path)
{
	auto f = ElfFile::open(path, true);
	EXPECT_TRUE(f.ok()) << f.error().message;
	return std::move(f.value());
}

std::vector<std::string> names(const std::vector<FunctionMatch> &ms)
{
	std::vector<std::string> out;
	for (auto &m : ms)
		out.push_back(m.demangled);
	return out;
}

TEST(Probes, NcclAliasesShareOneLine)
{
	REQUIRE_FILE(kNccl);
	ElfFile elf = open_elf(kNccl);
	uint64_t off = elf.vaddr_to_offset(elf.find("ncclAllReduce")->addr).value();
	ASSERT_EQ(elf.find("ncclAllReduce")->addr, elf.find("pncclAllReduce")->addr);
	// Either name finds the address; the public one is shown, the profiling one is its alias.
	for (std::string re : {"^ncclAllReduce$", "^pncclAllReduce$"}) {
		auto ms = match_functions(elf, re);
		ASSERT_TRUE(ms.ok()) << ms.error().message;
		ASSERT_EQ(ms->size(), 1u) << re;
		const FunctionMatch &m = ms->front();
		EXPECT_EQ(m.raw, "ncclAllReduce");
		EXPECT_EQ(m.aliases, std::vector<std::string>{"pncclAllReduce"});
		EXPECT_EQ(m.offset, off);
		EXPECT_EQ(m.size, elf.find("ncclAllReduce")->size);
		char head[32];
		snprintf(head, sizeof head, "0x%08llx  %llu  ", (unsigned long long)off, (unsigned long long)m.size);
		EXPECT_EQ(format_match(m), head + std::string("ncclAllReduce  (alias: pncclAllReduce)"));
	}
	// Cold partitions (ncclAllReduce.cold.N) are not functions to trace.
	auto all = match_functions(elf, "^ncclAll");
	ASSERT_TRUE(all.ok());
	EXPECT_EQ(names(*all), (std::vector<std::string>{"ncclAllGather", "ncclAllReduce", "ncclAlltoAll"}));
}

TEST(Probes, TestlibExactSet)
{
	ElfFile elf = open_elf(kTestlib);
	auto ms = match_functions(elf, "^tl_");
	ASSERT_TRUE(ms.ok());
	EXPECT_EQ(names(*ms),
		  (std::vector<std::string>{"tl_call", "tl_cet", "tl_cet_loop", "tl_eight", "tl_escape", "tl_inner",
					    "tl_jump_deep", "tl_leaf", "tl_noop", "tl_out", "tl_outer", "tl_recurse"}));
	for (auto &m : *ms) {
		EXPECT_EQ(m.offset, elf.vaddr_to_offset(elf.find(m.raw)->addr).value()) << m.raw;
		EXPECT_GT(m.size, 0u) << m.raw;
	}
	EXPECT_EQ(format_match(ms->front(), 4).substr(10), "    " + std::to_string(ms->front().size) + "  tl_call");
	auto none = match_functions(elf, "^tl_nothing$");
	ASSERT_TRUE(none.ok());
	EXPECT_TRUE(none->empty());
	auto bad = match_functions(elf, "tl_(");
	ASSERT_FALSE(bad.ok());
	EXPECT_NE(bad.error().message.find("tl_("), std::string::npos);
}

TEST(Probes, CloseMatches)
{
	ElfFile elf = open_elf(kTestlib);
	auto close = close_matches(elf, "tl_recurze");
	ASSERT_FALSE(close.empty());
	EXPECT_EQ(close.front(), "tl_recurse");
	EXPECT_LE(close.size(), 5u);
	EXPECT_EQ(close, close_matches(elf, "^TL_RECURZE$")); // regex syntax and case do not count
	EXPECT_TRUE(close_matches(elf, "zzqq").empty());
	EXPECT_TRUE(close_matches(elf, ".*").empty());
}

TEST(Probes, NcclCloseMatches)
{
	REQUIRE_FILE(kNccl);
	ElfFile elf = open_elf(kNccl);
	EXPECT_EQ(close_matches(elf, "ncclAllReduse").front(), "ncclAllReduce");
}

TEST(Probes, MangledPatterns)
{
	REQUIRE_FILE(kNccl);
	ElfFile elf = open_elf(kNccl);
	auto ms = match_functions(elf, "^_ZN");
	ASSERT_TRUE(ms.ok());
	ASSERT_FALSE(ms->empty());
	for (auto &m : *ms)
		EXPECT_NE(m.demangled, m.raw);
}

TEST(Probes, FunctionName)
{
	EXPECT_EQ(function_name("ncclAllReduce"), "ncclAllReduce");
	EXPECT_EQ(function_name("at::_ops::linear::call(at::Tensor const&, at::Tensor const&, "
				"c10::optional<at::Tensor> const&)"),
		  "at::_ops::linear::call");
	EXPECT_EQ(function_name("c10::TensorImpl::sizes() const"), "c10::TensorImpl::sizes");
	EXPECT_EQ(function_name("void std::vector<int, std::allocator<int> >::emplace_back<int>(int&&)"),
		  "std::vector<int, std::allocator<int> >::emplace_back<int>");
	EXPECT_EQ(function_name("(anonymous namespace)::f(int)"), "(anonymous namespace)::f");
	EXPECT_EQ(function_name("foo::operator()(int) const"), "foo::operator()");
	EXPECT_EQ(function_name("f(int) [clone .isra.0]"), "f");
}

TEST(Probes, LibraryGlob)
{
	EXPECT_EQ(library_glob("/usr/local/cuda-13.0/lib/libnccl.so.2"), "libnccl.so*");
	EXPECT_EQ(library_glob("/x/libtorch_cpu.so"), "libtorch_cpu.so*");
	EXPECT_EQ(library_glob("/x/libcudart.so.13.0.96"), "libcudart.so*");
	EXPECT_EQ(library_glob("/usr/bin/python3.11"), "/usr/bin/python3.11");
}

TEST(Probes, GeneratedSpecRoundTrips)
{
	ElfFile elf = open_elf(kTestlib);
	auto ms = match_functions(elf, "^tl_(outer|inner)$");
	ASSERT_TRUE(ms.ok());
	std::string text = generate_spec(*ms, "user", library_glob(kTestlib), "a test");
	auto set = parse_spec(text, "gen.json", true);
	ASSERT_TRUE(set.ok()) << set.error().message << "\n" << text;
	ASSERT_EQ(set->probes.size(), 2u);
	EXPECT_EQ(set->probes[0].function, "tl_inner");
	EXPECT_EQ(set->probes[1].function, "tl_outer");
	for (auto &p : set->probes) {
		EXPECT_EQ(p.layer, "user");
		EXPECT_EQ(p.library, "libeacgm_testlib.so*");
		EXPECT_EQ(p.symbols, std::vector<std::string>{p.function});
		EXPECT_TRUE(p.args.empty());
		EXPECT_TRUE(library_matches(p, kTestlib));
	}
	EXPECT_NE(text.find("\"about\""), std::string::npos);
	EXPECT_NE(text.find(R"(\"args\": [{)"), std::string::npos); // the hint on how to add them
	// A layer parse_spec refuses is caught before anything is written.
	EXPECT_FALSE(parse_spec(generate_spec(*ms, "Bad Layer", "x.so*", "t"), "gen", true).ok());
}

TEST(Probes, GeneratedSpecKeepsMangledSymbols)
{
	REQUIRE_FILE(kNccl);
	ElfFile elf = open_elf(kNccl);
	auto ms = match_functions(elf, "^nccl(AllReduce|Broadcast)$");
	ASSERT_TRUE(ms.ok());
	auto set = parse_spec(generate_spec(*ms, "mynccl", library_glob(kNccl), "t"), "gen", true);
	ASSERT_TRUE(set.ok()) << set.error().message;
	ASSERT_EQ(set->probes.size(), 2u);
	EXPECT_EQ(set->probes[0].function, "ncclAllReduce");
	EXPECT_EQ(set->probes[0].library, "libnccl.so*");
	EXPECT_EQ(set->probes[1].symbols, std::vector<std::string>{"ncclBroadcast"});
}

TEST(Probes, ResolveLibrary)
{
	auto real = resolve_library(kTestlib);
	ASSERT_TRUE(real.ok());
	EXPECT_EQ(real.value(), kTestlib);
	auto missing = resolve_library("libeacgm_no_such_lib.so.7");
	ASSERT_FALSE(missing.ok());
	EXPECT_NE(missing.error().message.find("libeacgm_no_such_lib.so.7"), std::string::npos);
	EXPECT_EQ(missing.error().kind, ErrorKind::NotFound);
	REQUIRE_FILE(kNccl);
	auto by_soname = resolve_library("libnccl.so.2");
	ASSERT_TRUE(by_soname.ok()) << by_soname.error().message;
	char want[PATH_MAX];
	ASSERT_TRUE(realpath(kNccl.c_str(), want));
	EXPECT_EQ(by_soname.value(), want);
}

} // namespace
} // namespace eacgm
