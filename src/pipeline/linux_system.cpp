// SPDX-License-Identifier: Apache-2.0
#include "pipeline/linux_system.h"

#include <unistd.h>

#include "common/fs.h"
#include "common/threads.h"

namespace eacgm {

std::string read_proc_text(const std::string &path)
{
	std::string s = read_small_file(path).value_or("");
	while (!s.empty() && (s.back() == '\n' || s.back() == '\0'))
		s.pop_back();
	for (auto &c : s)
		if (c == '\0')
			c = ' ';
	return s;
}

Result<LinuxSystem> LinuxSystem::open()
{
	auto w = PidWatch::open();
	if (!w)
		return w.error();
	return LinuxSystem(std::move(w.value()));
}

static std::string proc_dir(uint32_t pid) { return "/proc/" + std::to_string(pid); }

std::string LinuxSystem::comm(uint32_t pid) { return read_proc_text(proc_dir(pid) + "/comm"); }

std::string LinuxSystem::cmdline(uint32_t pid) { return read_proc_text(proc_dir(pid) + "/cmdline"); }

std::string LinuxSystem::environment(uint32_t pid) { return read_small_file(proc_dir(pid) + "/environ").value_or(""); }

std::string LinuxSystem::thread_name(uint32_t pid, uint32_t tid)
{
	return read_proc_text(proc_dir(pid) + "/task/" + std::to_string(tid) + "/comm");
}

std::vector<uint32_t> LinuxSystem::threads(uint32_t pid)
{
	slow_work("listing a process's threads");
	return list_threads(pid);
}

bool LinuxSystem::exists(uint32_t pid)
{
	slow_work("looking a process up");
	return access(proc_dir(pid).c_str(), F_OK) == 0;
}

} // namespace eacgm
