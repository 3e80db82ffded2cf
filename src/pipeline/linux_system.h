// SPDX-License-Identifier: Apache-2.0
// The System of a live node (pipeline/sources.h): /proc for what a process
// is, pidfds in one epoll set for when it exits.
#pragma once
#include "common/clock.h"
#include "pipeline/sources.h"
#include "probe/pid_watch.h"

namespace eacgm {

class LinuxSystem : public System {
public:
	static Result<LinuxSystem> open();

	std::string comm(uint32_t pid) override;
	std::string cmdline(uint32_t pid) override;
	std::string thread_name(uint32_t pid, uint32_t tid) override;
	std::optional<uint32_t> parent(uint32_t pid) override { return parent_pid(pid); }
	CgroupInfo cgroup(uint32_t pid) override { return cgroup_of(pid); }
	std::string environment(uint32_t pid) override;
	Result<std::vector<Mapping>> maps(uint32_t pid) override { return read_maps(pid); }
	std::vector<uint32_t> threads(uint32_t pid) override;
	bool exists(uint32_t pid) override;
	std::optional<int> exit_status(uint32_t pid) override { return zombie_exit_status(pid); }
	std::string proc_root() const override { return "/proc"; }
	uint64_t now_ns() override { return mono_ns(); }

	Result<PidState> watch(uint32_t pid, UniqueFd pidfd) override { return exits_.add(pid, std::move(pidfd)); }
	void unwatch(uint32_t pid) override { exits_.remove(pid); }
	int exits_fd() const override { return exits_.fd(); }
	std::vector<uint32_t> take_exited() override { return exits_.take_exited(); }

private:
	explicit LinuxSystem(PidWatch exits) : exits_(std::move(exits)) {}
	PidWatch exits_;
};

// Reads a file under /proc into a string without the trailing newline;
// cmdline's NUL separators become spaces.
std::string read_proc_text(const std::string &path);

} // namespace eacgm
