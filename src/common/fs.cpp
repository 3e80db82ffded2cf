#include "common/fs.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <fcntl.h>
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
		return make_error("empty output path: give a file name");
	std::string dir = dir_of(path);
	if (access(dir.c_str(), W_OK) != 0)
		return make_error("cannot write " + path + ": directory " + dir + ": " + std::strerror(errno) +
				  "; choose another output path");
	if (access(path.c_str(), F_OK) == 0 && access(path.c_str(), W_OK) != 0)
		return make_error("cannot write " + path + ": " + std::strerror(errno) +
				  "; choose another output path");
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
		std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
		if (!out)
			return make_error("cannot write " + path + ": " + std::strerror(errno) +
					  "; choose another output path");
		if (auto r = write(out); !r) {
			out.close();
			std::remove(tmp.c_str());
			return r;
		}
		out.flush();
		if (!out) {
			std::remove(tmp.c_str());
			return make_error("writing " + path + " failed: " + std::strerror(errno));
		}
	}
	if (std::rename(tmp.c_str(), path.c_str()) != 0) {
		std::string err = std::strerror(errno);
		std::remove(tmp.c_str());
		return make_error("cannot write " + path + ": " + err);
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
