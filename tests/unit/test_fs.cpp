// SPDX-License-Identifier: Apache-2.0
// The small file helpers every layer shares.
#include <gtest/gtest.h>

#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "export/http.h"

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

// Kept open and read from the start each time: what the file holds at each
// read, whole (past 4 KiB), shorter after a rewrite in place; a missing file
// is nullptr until it appears. A /proc file's text is made anew per read:
// /proc/self/schedstat's run time grows between two reads of one object.
TEST(Fs, RereadFileReadsWhatTheFileHoldsNow)
{
	std::string path = "/tmp/eacgm-reread-" + std::to_string(getpid());
	unlink(path.c_str());
	RereadFile f(path);
	EXPECT_EQ(f.read(), nullptr);
	std::string big(5000, 'x');
	std::ofstream(path, std::ios::binary) << big;
	ASSERT_NE(f.read(), nullptr);
	EXPECT_EQ(*f.read(), big);
	std::ofstream(path, std::ios::binary | std::ios::trunc) << "short";
	ASSERT_NE(f.read(), nullptr);
	EXPECT_EQ(*f.read(), "short");
	unlink(path.c_str());

	RereadFile sched("/proc/self/schedstat");
	const std::string *first = sched.read();
	ASSERT_NE(first, nullptr);
	uint64_t before = std::stoull(*first);
	volatile uint64_t spin = 0;
	for (uint64_t want = before + 2'000'000; std::stoull(*sched.read()) < want && spin < 4'000'000'000ull;)
		for (int i = 0; i < 100000; i++)
			spin = spin + 1;
	EXPECT_GE(std::stoull(*sched.read()), before + 2'000'000) << "the text was not made anew";
}

// An output's path must name a regular file or nothing: the rename at the
// end would otherwise replace a FIFO, a device or a link.
TEST(Fs, CheckWritableRefusesWhatIsNotARegularFile)
{
	std::string dir = "/tmp/eacgm-fs-w-" + std::to_string(getpid());
	ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
	ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
	ASSERT_EQ(symlink("/proc/self/mem", (dir + "/link").c_str()), 0);
	std::ofstream(dir + "/plain") << "x";
	EXPECT_TRUE(check_writable(dir + "/plain").ok());
	EXPECT_TRUE(check_writable(dir + "/new").ok());
	for (auto [name, what] : {std::pair{"fifo", "a FIFO"}, {"link", "a symbolic link"}, {"", "a directory"}}) {
		auto r = check_writable(dir + "/" + name);
		ASSERT_FALSE(r.ok()) << name;
		EXPECT_NE(r.error().message.find(std::string("it is ") + what + ", not a regular file"),
			  std::string::npos)
			<< r.error().message;
		EXPECT_EQ(r.error().kind, ErrorKind::BadInput) << name;
	}
	ASSERT_FALSE(check_writable("/dev/null").ok());
	EXPECT_EQ(check_writable("/dev/null").error().kind, ErrorKind::BadInput);
	// A directory that is not there: errno's kind, errno's words.
	auto nowhere = check_writable(dir + "/none/x.db");
	ASSERT_FALSE(nowhere.ok());
	EXPECT_EQ(nowhere.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(nowhere.error().message,
		  "cannot write " + dir + "/none/x.db: directory " + dir +
			  "/none: No such file or directory; choose another output path");
	auto atomic = write_file_atomic(dir + "/none/x.json", "{}");
	ASSERT_FALSE(atomic.ok());
	EXPECT_EQ(atomic.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(atomic.error().message,
		  "cannot write " + dir + "/none/x.json: " + dir + "/none/x.json.tmp." + std::to_string(getpid()) +
			  ": No such file or directory; choose another output path");
	for (auto n : {"fifo", "link", "plain"})
		unlink((dir + "/" + n).c_str());
	rmdir(dir.c_str());
}

// The temporary file is the writer's own: created owner-only, and a link
// planted at its name is removed, not followed.
TEST(Fs, WriteFileAtomicIsOwnerOnlyAndFollowsNoLink)
{
	std::string dir = "/tmp/eacgm-fs-a-" + std::to_string(getpid());
	ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
	std::string victim = dir + "/victim", out = dir + "/out.json";
	std::ofstream(victim) << "precious";
	ASSERT_EQ(symlink(victim.c_str(), (out + ".tmp." + std::to_string(getpid())).c_str()), 0);
	ASSERT_TRUE(write_file_atomic(out, "{}\n").ok());
	EXPECT_EQ(read_small_file(victim), "precious");
	EXPECT_EQ(read_small_file(out), "{}\n");
	struct stat sb;
	ASSERT_EQ(stat(out.c_str(), &sb), 0);
	EXPECT_EQ(sb.st_mode & 0777, 0600u);
	unlink(out.c_str());
	unlink(victim.c_str());
	rmdir(dir.c_str());
}

TEST(Http, BearerMatchesOnlyTheWholeToken)
{
	EXPECT_TRUE(bearer_matches("Bearer abc", "abc"));
	EXPECT_TRUE(bearer_matches("bearer abc", "abc")); // the scheme is case-insensitive (RFC 7235)
	for (auto h : {"", "Bearer", "Bearer ", "Bearer ab", "Bearer abcd", "Bearer abC", "Basic abc", "Bearer  abc"})
		EXPECT_FALSE(bearer_matches(h, "abc")) << h;
	EXPECT_FALSE(bearer_matches("Bearer ", "")); // no token: nothing matches
}

} // namespace
} // namespace eacgm
