// SPDX-License-Identifier: Apache-2.0
// ElfPrefetch: the libraries a process maps that the specs name are read on
// a thread and handed over once, by real path; anything else is not.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <unistd.h>

#include "probe/elf_prefetch.h"

namespace eacgm {
namespace {

// The real path of this process's libc, as its maps name it.
std::string own_libc()
{
	std::ifstream maps("/proc/self/maps");
	for (std::string line; std::getline(maps, line);) {
		auto slash = line.find('/');
		if (slash == std::string::npos)
			continue;
		std::string path = line.substr(slash);
		if (path.find("/libc.so") != std::string::npos || path.find("/libc-") != std::string::npos) {
			char real[PATH_MAX];
			return realpath(path.c_str(), real) ? real : path;
		}
	}
	return "";
}

TEST(ElfPrefetch, ReadsTheMappedLibrariesTheSpecsNameOnce)
{
	std::string libc = own_libc();
	ASSERT_FALSE(libc.empty());
	auto specs = parse_spec(R"({"layer": "x", "library": "libc.so*", "probes": [{"function": "getpid"}]})", "test",
				false);
	ASSERT_TRUE(specs.ok()) << specs.error().message;
	ElfPrefetch prefetch;
	prefetch.start(specs.value(), getpid(), "");
	auto got = prefetch.take(libc);
	ASSERT_TRUE(got.has_value());
	ASSERT_TRUE(got->elf.ok()) << got->elf.error().message;
	EXPECT_NE(got->elf.value().find("getpid"), nullptr);
	EXPECT_EQ(got->elf.value().path(), libc);
	EXPECT_TRUE(got->matches.empty());             // the spec names symbols, not a pattern
	EXPECT_FALSE(prefetch.take(libc).has_value()); // handed over once
	EXPECT_FALSE(prefetch.take("/usr/lib/x86_64-linux-gnu/libm.so.6").has_value()); // no spec names it
}

// A pattern probe's functions are matched on the prefetch's thread too, with
// the same result as matching them when attaching.
TEST(ElfPrefetch, PatternsAreMatchedAhead)
{
	std::string libc = own_libc();
	ASSERT_FALSE(libc.empty());
	auto specs = parse_spec(
		R"({"layer": "x", "library": "libc.so*", "probes": [{"function": "$1", "match": "^(getpid|getppid)$"}]})",
		"test", false);
	ASSERT_TRUE(specs.ok()) << specs.error().message;
	ElfPrefetch prefetch;
	prefetch.start(specs.value(), getpid(), "");
	auto got = prefetch.take(libc);
	ASSERT_TRUE(got.has_value() && got->elf.ok());
	auto it = got->matches.find("^(getpid|getppid)$");
	ASSERT_NE(it, got->matches.end());
	EXPECT_EQ(it->second, match_symbols(got->elf.value(), "^(getpid|getppid)$"));
	std::set<std::string> names;
	for (uint32_t k : it->second)
		names.insert(got->elf.value().symbols()[k].demangled());
	EXPECT_EQ(names, (std::set<std::string>{"getpid", "getppid"}));
}

TEST(ElfPrefetch, NotStartedHasNothing)
{
	ElfPrefetch prefetch;
	EXPECT_FALSE(prefetch.take("/usr/lib/x86_64-linux-gnu/libc.so.6").has_value());
}

} // namespace
} // namespace eacgm
