// SPDX-License-Identifier: Apache-2.0
// When traced processes exit, from the kernel's own signal rather than from
// /proc guesses: a pidfd (Linux 5.3+) becomes readable when its process
// exits, whether or not its parent has reaped it yet (a zombie still has a
// /proc/PID directory), and it keeps naming that process if the pid is reused.
// One epoll set holds them all, so a recording wakes as soon as one exits.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/result.h"

namespace eacgm {

enum class PidState {
	alive,
	exited, // a zombie: gone, but not yet reaped by its parent
	gone,   // no such process (never was, or exited and reaped)
};

// A pidfd for pid, or nothing when there is no such process; any other
// failure (no pidfd support, out of descriptors) is an error.
Result<std::optional<UniqueFd>> open_pidfd(uint32_t pid);
// Whether the process of a pidfd has exited (its pidfd is readable).
bool pidfd_exited(const UniqueFd &pidfd);
// A pidfd of one thread (PIDFD_THREAD, Linux 6.9+): what keys a BPF task
// storage map from user space. Not valid (errno says why) where it fails.
UniqueFd thread_pidfd(uint32_t tid);

// The parent of a process, from /proc/PID/stat; nothing once it is gone.
std::optional<uint32_t> parent_pid(uint32_t pid);

// The CPU time one thread has used, in ns, from /proc/PID/task/TID/schedstat
// (the scheduler's own count, to the ns); nothing once it is gone or where
// the kernel keeps no schedstat.
std::optional<uint64_t> thread_cpu_ns(uint32_t pid, uint32_t tid);

// The whole machine's CPU time since boot, in ns: in use (user, nice,
// system, irq, softirq; guest time is inside user) and idle (idle, iowait),
// from /proc/stat's first line (USER_HZ ticks); steal, time the hypervisor
// ran something else, is neither. Nothing when the text holds no such line.
struct MachineCpu {
	uint64_t busy_ns = 0, idle_ns = 0;
};
std::optional<MachineCpu> parse_machine_cpu(std::string_view proc_stat);

// A kernel wait status (exit_code) as the shell's number: the exit code, or
// 128 + the signal that ended it.
int shell_status(int32_t wait_status);

// What /proc says of a process that has exited but is not yet reaped: its
// exit status (the shell's number) while it is a zombie, else nothing.
std::optional<int> zombie_exit_status(uint32_t pid);

// The user-facing state of pid at start, for `record -p`: an error that
// names the process when it is gone or a zombie, else its pidfd.
Result<UniqueFd> open_live_process(uint32_t pid);

class PidWatch {
public:
	static Result<PidWatch> open();

	// Watches pid (with the pidfd given, or a new one). Returns its state
	// now: an exited or gone process is reported at once, not watched.
	// A pid watched already stays as it is (alive).
	Result<PidState> add(uint32_t pid, UniqueFd pidfd = {});
	void remove(uint32_t pid);
	bool watching(uint32_t pid) const { return fds_.count(pid) > 0; }
	size_t size() const { return fds_.size(); }
	// Readable (for poll/epoll) while a watched process has exited.
	int fd() const { return epoll_.get(); }
	// The watched processes that have exited since the last call; they
	// are no longer watched. Does not block.
	std::vector<uint32_t> take_exited();

private:
	UniqueFd epoll_;
	std::map<uint32_t, UniqueFd> fds_;
};

} // namespace eacgm
