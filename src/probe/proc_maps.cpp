#include "probe/proc_maps.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace eacgm {

Result<std::vector<Mapping>> read_maps(uint32_t pid, const std::string &proc_root)
{
	const std::string dir = proc_root + "/" + std::to_string(pid);
	std::ifstream in(dir + "/maps");
	if (!in) {
		const int err = errno;
		struct stat st;
		if (::stat(dir.c_str(), &st) != 0)
			return make_error("process " + std::to_string(pid) + " does not exist (no " + dir +
					  "); it may have exited, check the pid");
		return make_error("cannot read " + dir + "/maps (" + std::strerror(err) +
				  "); run as root or with CAP_SYS_PTRACE to inspect another user's process");
	}
	std::vector<Mapping> maps;
	for (std::string line; std::getline(in, line);) {
		Mapping m;
		char perms[8] = {};
		int path_at = -1;
		// "start-end perms offset major:minor inode   path"; the path is the rest
		// of the line and may contain spaces.
		if (std::sscanf(line.c_str(),
				"%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %" SCNx64 ":%" SCNx64 " %" SCNu64 " %n",
				&m.start, &m.end, perms, &m.offset, &m.dev_major, &m.dev_minor, &m.inode, &path_at) < 7)
			continue;
		m.perms = perms;
		if (path_at > 0)
			m.path = line.substr(size_t(path_at));
		maps.push_back(std::move(m));
	}
	return maps;
}

const Mapping *mapping_for(const std::vector<Mapping> &maps, uint64_t addr)
{
	auto it = std::upper_bound(maps.begin(), maps.end(), addr,
				   [](uint64_t a, const Mapping &m) { return a < m.start; });
	if (it == maps.begin())
		return nullptr;
	--it;
	return addr < it->end ? &*it : nullptr;
}

std::vector<std::string> mapped_files(const std::vector<Mapping> &maps)
{
	static constexpr std::string_view deleted = " (deleted)";
	std::vector<std::string> out;
	for (const Mapping &m : maps) {
		if (!m.exec() || !m.path.starts_with('/') || m.path.ends_with(deleted))
			continue;
		if (std::find(out.begin(), out.end(), m.path) == out.end())
			out.push_back(m.path);
	}
	return out;
}

std::string host_path(uint32_t pid, const std::string &path, const std::string &proc_root)
{
	const std::string rooted = proc_root + "/" + std::to_string(pid) + "/root" + path;
	struct stat plain, inside;
	if (::stat(path.c_str(), &plain) != 0)
		return rooted;
	if (::stat(rooted.c_str(), &inside) != 0)
		return path; // exited: best guess is the host file
	return plain.st_dev == inside.st_dev && plain.st_ino == inside.st_ino ? path : rooted;
}

} // namespace eacgm
