// SPDX-License-Identifier: Apache-2.0
#include "probe/proc_maps.h"
#include "common/threads.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace eacgm {

namespace {

// "Key:" lines of a /proc/PID/status file, their values trimmed.
std::string status_field(const std::string &path, const std::string &key)
{
	std::ifstream in(path);
	for (std::string line; std::getline(in, line);)
		if (line.compare(0, key.size() + 1, key + ":") == 0) {
			size_t at = line.find_first_not_of(" \t", key.size() + 1);
			return at == std::string::npos ? "" : line.substr(at);
		}
	return "";
}

uint64_t cap_mask(const std::string &hex) { return std::strtoull(hex.c_str(), nullptr, 16); }

// Why the kernel refused a process's maps, from what can be checked: eacgm's
// own CAP_SYS_PTRACE, the process's owner and capabilities. Past those, only
// a security module or a container boundary is left, and the message says so
// rather than advising root to a root that has it.
std::string why_denied(uint32_t pid, const std::string &dir)
{
	constexpr int kSysPtrace = 19;                           // CAP_SYS_PTRACE
	std::string uids = status_field(dir + "/status", "Uid"); // real, effective, saved, fs
	std::string who = "process " + std::to_string(pid) + " (" + status_field(dir + "/status", "Name") + ", uid " +
		uids.substr(0, uids.find_first_of(" \t")) + ")";
	uint64_t mine = cap_mask(status_field("/proc/self/status", "CapEff"));
	if (!(mine & (1ull << kSysPtrace)))
		return who +
			" is another user's, or holds capabilities eacgm lacks, and eacgm has no CAP_SYS_PTRACE: run "
			"it as root (sudo) or grant it CAP_SYS_PTRACE";
	return "the kernel refused although eacgm holds CAP_SYS_PTRACE: " + who +
		" is protected by a security module (Landlock, SELinux, AppArmor, Yama's ptrace_scope 3) or a "
		"container boundary; trace it from where it may be inspected (the host, or inside its container)";
}

} // namespace

Result<std::vector<Mapping>> read_maps(uint32_t pid, const std::string &proc_root)
{
	slow_work("reading a process's maps");
	const std::string dir = proc_root + "/" + std::to_string(pid);
	std::ifstream in(dir + "/maps");
	if (!in) {
		const int err = errno;
		struct stat st;
		if (::stat(dir.c_str(), &st) != 0)
			return make_error(ErrorKind::NotFound,
					  "process " + std::to_string(pid) + " does not exist (no " + dir +
						  "); it may have exited, check the pid");
		if (err != EACCES && err != EPERM)
			return errno_error(err, "cannot read " + dir + "/maps");
		return make_error(kind_of_errno(err),
				  "cannot read " + dir + "/maps (" + std::strerror(err) + "): " + why_denied(pid, dir));
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
