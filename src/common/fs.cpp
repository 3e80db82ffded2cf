// SPDX-License-Identifier: Apache-2.0
#include "common/fs.h"
#include "common/threads.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ext/stdio_filebuf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace eacgm {

std::vector<uint32_t> list_threads(uint32_t pid)
{
	std::vector<uint32_t> tids;
	std::error_code ec;
	for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec);
	     !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
		const std::string name = it->path().filename();
		char *end = nullptr;
		unsigned long tid = std::strtoul(name.c_str(), &end, 10);
		if (end && *end == 0 && tid > 0)
			tids.push_back(uint32_t(tid));
	}
	return tids;
}

std::optional<std::string> read_small_file(const std::string &path)
{
	slow_work("reading a file");
	int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return std::nullopt;
	std::string out;
	char buf[4096];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			out.append(buf, static_cast<size_t>(n));
	close(fd);
	if (n < 0)
		return std::nullopt;
	return out;
}

const std::string *RereadFile::read()
{
	if (!fd_)
		fd_.reset(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
	if (!fd_)
		return nullptr;
	size_t have = 0;
	for (;;) {
		if (text_.size() < have + 4096)
			text_.resize(have + 4096);
		ssize_t n = pread(fd_.get(), text_.data() + have, text_.size() - have, off_t(have));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fd_.reset();
			return nullptr;
		}
		if (n == 0)
			break;
		have += size_t(n);
	}
	text_.resize(have);
	return &text_;
}

static std::string dir_of(const std::string &path)
{
	auto slash = path.rfind('/');
	if (slash == std::string::npos)
		return ".";
	return slash == 0 ? "/" : path.substr(0, slash);
}

Result<void> check_writable(const std::string &path)
{
	if (path.empty())
		return make_error(ErrorKind::BadInput, "empty output path: give a file name");
	std::string dir = dir_of(path);
	if (access(dir.c_str(), W_OK) != 0)
		return errno_error(errno, "cannot write " + path + ": directory " + dir,
				   "; choose another output path");
	// An output is replaced by rename at the end: what the path names now
	// must be a plain file, or that rename would silently take a FIFO, a
	// device or a link's place (and a link may point anywhere, /proc too).
	struct stat sb;
	if (lstat(path.c_str(), &sb) == 0) {
		const char *what = S_ISLNK(sb.st_mode) ? "a symbolic link"
			: S_ISFIFO(sb.st_mode)         ? "a FIFO"
			: S_ISCHR(sb.st_mode)          ? "a character device"
			: S_ISBLK(sb.st_mode)          ? "a block device"
			: S_ISSOCK(sb.st_mode)         ? "a socket"
			: S_ISDIR(sb.st_mode)          ? "a directory"
						       : nullptr;
		if (what)
			return make_error(ErrorKind::BadInput,
					  "cannot write " + path + ": it is " + what +
						  ", not a regular file; give the path of a file to create or replace");
		if (access(path.c_str(), W_OK) != 0)
			return errno_error(errno, "cannot write " + path, "; choose another output path");
	}
	return {};
}

Result<void> write_file_atomic(const std::string &path, const std::string &content)
{
	return write_file_atomic(path, [&](std::ostream &out) -> Result<void> {
		out << content;
		return {};
	});
}

Result<void> write_file_atomic(const std::string &path, const std::function<Result<void>(std::ostream &)> &write)
{
	std::string tmp = path + ".tmp." + std::to_string(getpid());
	{
		// Created here or not at all, owner-only, never through a link: in a
		// shared directory another user could have put one at this name.
		int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno == EEXIST && unlink(tmp.c_str()) == 0) // a stale one of a crashed run
			fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return errno_error(errno, "cannot write " + path + ": " + tmp, "; choose another output path");
		__gnu_cxx::stdio_filebuf<char> buf(fd, std::ios::out | std::ios::binary); // closes fd
		std::ostream out(&buf);
		if (auto r = write(out); !r) {
			std::remove(tmp.c_str());
			return r;
		}
		out.flush();
		if (!out || buf.close() == nullptr) {
			const int err = errno; // before remove() may change it
			std::remove(tmp.c_str());
			return errno_error(err, "writing " + path + " failed");
		}
	}
	if (std::rename(tmp.c_str(), path.c_str()) != 0) {
		const int err = errno;
		std::remove(tmp.c_str());
		return errno_error(err, "cannot write " + path);
	}
	return {};
}

std::string host_name()
{
	char buf[256] = {};
	if (gethostname(buf, sizeof(buf) - 1) != 0)
		return "";
	return buf;
}

} // namespace eacgm
