// The small file helpers every layer shares.
#include <gtest/gtest.h>

#include <fstream>
#include <unistd.h>

#include "common/fs.h"

namespace eacgm {
namespace {

// Read whole, past one read()'s buffer, byte for byte; a file that is not
// there is nullopt, an empty one is "".
TEST(Fs, ReadSmallFileReadsItWhole)
{
	std::string path = "/tmp/eacgm-fs-" + std::to_string(getpid());
	std::string text;
	for (int i = 0; i < 2000; i++)
		text += std::to_string(i) + (i % 7 ? " " : "\n");
	text += std::string("\0tail", 5); // NUL bytes kept
	std::ofstream(path, std::ios::binary) << text;
	auto read = read_small_file(path);
	ASSERT_TRUE(read.has_value());
	EXPECT_GT(text.size(), 4096u);
	EXPECT_EQ(*read, text);
	std::ofstream(path, std::ios::binary | std::ios::trunc).flush();
	EXPECT_EQ(read_small_file(path), std::string());
	unlink(path.c_str());
	EXPECT_EQ(read_small_file(path), std::nullopt);
	// A /proc file reads like any other (its size is 0 to stat).
	auto stat = read_small_file("/proc/self/stat");
	ASSERT_TRUE(stat.has_value());
	EXPECT_EQ(stat->substr(0, std::to_string(getpid()).size() + 1), std::to_string(getpid()) + " ");
}

} // namespace
} // namespace eacgm
