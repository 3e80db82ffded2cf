// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "probe/proc_maps.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

struct TempDir {
	fs::path path;
	TempDir()
	{
		char tmpl[] = "/tmp/eacgm_maps_XXXXXX";
		path = mkdtemp(tmpl);
	}
	~TempDir() { fs::remove_all(path); }
	std::string write(const fs::path &rel, const std::string &content) const
	{
		fs::create_directories((path / rel).parent_path());
		std::ofstream(path / rel) << content;
		return (path / rel).string();
	}
};

__attribute__((noinline)) int local_function(int x) { return x * 7 + 1; }

TEST(ProcMaps, OwnProcess)
{
	auto maps = read_maps(getpid());
	ASSERT_TRUE(maps.ok()) << maps.error().message;
	const std::string exe = fs::read_symlink("/proc/self/exe").string();
	const Mapping *m = mapping_for(*maps, reinterpret_cast<uint64_t>(&local_function));
	ASSERT_NE(m, nullptr);
	EXPECT_EQ(m->path, exe);
	EXPECT_TRUE(m->exec());

	auto files = mapped_files(*maps);
	EXPECT_NE(std::find(files.begin(), files.end(), exe), files.end());
	EXPECT_TRUE(std::any_of(files.begin(), files.end(), [](const std::string &f) {
		return f.find("/libc.so") != std::string::npos || f.find("/libc-") != std::string::npos;
	}));
	EXPECT_EQ(mapping_for(*maps, 0), nullptr);
}

TEST(ProcMaps, ParsesFakeMaps)
{
	TempDir root;
	root.write(
		"123/maps",
		"55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 1234                       /usr/bin/my prog\n"
		"55d0c0a02000-55d0c0a05000 r-xp 00002000 08:01 1234                       /usr/bin/my prog\n"
		"7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n"
		"7f0000001000-7f0000002000 r-xp 00000000 00:05 99                         /memfd:jit (deleted)\n"
		"7f0000002000-7f0000003000 r-xp 00001000 fd:02 555                        /opt/lib/libx.so (deleted)\n"
		"7f0000004000-7f0000005000 rw-s 00000000 00:1a 42                         /dev/shm/weights file\n"
		"7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]\n"
		"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n");
	auto maps = read_maps(123, root.path.string());
	ASSERT_TRUE(maps.ok()) << maps.error().message;
	ASSERT_EQ(maps->size(), 8u);
	const Mapping &text = (*maps)[1];
	EXPECT_EQ(text.start, 0x55d0c0a02000u);
	EXPECT_EQ(text.end, 0x55d0c0a05000u);
	EXPECT_EQ(text.offset, 0x2000u);
	EXPECT_EQ(text.perms, "r-xp");
	EXPECT_EQ(text.dev_major, 8u);
	EXPECT_EQ(text.dev_minor, 1u);
	EXPECT_EQ(text.inode, 1234u);
	EXPECT_EQ(text.path, "/usr/bin/my prog");
	EXPECT_EQ((*maps)[2].path, "");
	EXPECT_EQ((*maps)[2].inode, 0u);
	EXPECT_EQ((*maps)[4].path, "/opt/lib/libx.so (deleted)");
	EXPECT_EQ((*maps)[4].dev_major, 0xfdu);
	EXPECT_EQ((*maps)[5].path, "/dev/shm/weights file");
	EXPECT_EQ((*maps)[6].path, "[vdso]");
	EXPECT_EQ((*maps)[7].end, 0xffffffffff601000u);

	EXPECT_EQ(mapping_for(*maps, 0x55d0c0a02000), &text);
	EXPECT_EQ(mapping_for(*maps, 0x55d0c0a04fff), &text);
	EXPECT_EQ(mapping_for(*maps, 0x55d0c0a05000), nullptr); // end is exclusive, then a gap
	EXPECT_EQ(mapping_for(*maps, 0x7f0000003800), nullptr);
	EXPECT_EQ(mapping_for(*maps, 0x1000), nullptr);

	// Executable, real, still present files only.
	EXPECT_EQ(mapped_files(*maps), std::vector<std::string>{"/usr/bin/my prog"});
}

TEST(ProcMaps, UnknownPidNamesThePid)
{
	auto maps = read_maps(2147483647u);
	ASSERT_FALSE(maps.ok());
	EXPECT_NE(maps.error().message.find("2147483647"), std::string::npos) << maps.error().message;
	EXPECT_EQ(maps.error().kind, ErrorKind::NotFound);

	TempDir root;
	auto fake = read_maps(77, root.path.string());
	ASSERT_FALSE(fake.ok());
	EXPECT_NE(fake.error().message.find("77"), std::string::npos) << fake.error().message;
	EXPECT_EQ(fake.error().kind, ErrorKind::NotFound);
}

TEST(ProcMaps, HostPath)
{
	// Same mount namespace: the plain path is the same file.
	const std::string exe = fs::read_symlink("/proc/self/exe").string();
	EXPECT_EQ(host_path(getpid(), exe), exe);
	EXPECT_EQ(host_path(getpid(), "/nonexistent/lib.so"),
		  "/proc/" + std::to_string(getpid()) + "/root/nonexistent/lib.so");

	TempDir root, host;
	const std::string r = root.path.string();
	// Only inside the container.
	const std::string inside = root.write("7/root/only_inside/lib.so", "x");
	EXPECT_EQ(host_path(7, "/only_inside/lib.so", r), inside);
	// Exists on both sides but they are different files: the container's wins.
	const std::string plain = host.write("lib.so", "host");
	const std::string shadow = root.write("7/root" + plain, "container");
	EXPECT_EQ(host_path(7, plain, r), shadow);
	// The process root is gone (exited): the host file is the best guess.
	EXPECT_EQ(host_path(8, plain, r), plain);
}

} // namespace
} // namespace eacgm
