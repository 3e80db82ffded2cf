// SPDX-License-Identifier: Apache-2.0
#include "probe/pid_watch.h"

#include <fcntl.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sstream>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/text.h"

namespace eacgm {

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 // the same number on every architecture
#endif

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL // linux/pidfd.h, 6.9+; glibc 2.36 lacks it
#endif

UniqueFd thread_pidfd(uint32_t tid) { return UniqueFd(int(syscall(SYS_pidfd_open, pid_t(tid), PIDFD_THREAD))); }

Result<std::optional<UniqueFd>> open_pidfd(uint32_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (fd >= 0)
		return std::optional<UniqueFd>(UniqueFd(fd));
	if (errno == ESRCH)
		return std::optional<UniqueFd>();
	if (errno == ENOSYS)
		return make_error(ErrorKind::Other,
				  "this kernel has no pidfd_open (Linux 5.3 or later is needed to follow processes)");
	const int err = errno;
	return errno_error(err, "cannot watch process " + std::to_string(pid) + ": pidfd_open",
			   err == EMFILE ? " (raise the open-file limit: ulimit -n)" : "");
}

bool pidfd_exited(const UniqueFd &pidfd)
{
	pollfd p = {pidfd.get(), POLLIN, 0};
	return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

namespace {

struct ProcStat {
	char state = 0;
	std::optional<uint32_t> ppid;
	int exit_code = -1; // a wait status; -1 when the kernel does not say
};

// /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces and
// parentheses, so fields are counted from the last ')'. Field 3 is the
// state, 4 the parent and 52 the exit code (Linux 3.5+), a wait status.
std::optional<ProcStat> read_stat(uint32_t pid)
{
	std::string stat = read_small_file("/proc/" + std::to_string(pid) + "/stat").value_or("");
	auto paren = stat.rfind(')');
	if (paren == std::string::npos)
		return std::nullopt;
	std::istringstream fields(stat.substr(paren + 1));
	std::string f;
	ProcStat st;
	for (int i = 3; fields >> f; i++) {
		if (i == 3)
			st.state = f[0];
		if (i == 4)
			st.ppid = uint32_t(std::strtoul(f.c_str(), nullptr, 10));
		if (i == 52)
			st.exit_code = std::atoi(f.c_str());
	}
	return st;
}

} // namespace

std::optional<uint32_t> parent_pid(uint32_t pid)
{
	auto s = read_stat(pid);
	return s ? s->ppid : std::nullopt;
}

std::optional<uint64_t> thread_cpu_ns(uint32_t pid, uint32_t tid)
{
	// "on-CPU ns, run-queue wait ns, timeslices"
	auto text = read_small_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat");
	if (!text || text->empty() || !std::isdigit(static_cast<unsigned char>((*text)[0])))
		return std::nullopt;
	return std::strtoull(text->c_str(), nullptr, 10);
}

std::optional<MachineCpu> parse_machine_cpu(std::string_view text)
{
	std::string_view line = next_line(text);
	if (next_word(line) != "cpu")
		return std::nullopt;
	uint64_t v[8]; // user nice system idle iowait irq softirq steal
	for (uint64_t &x : v)
		if (!parse_number(next_word(line), x))
			return std::nullopt;
	static const double ns_per_tick = 1e9 / double(sysconf(_SC_CLK_TCK));
	auto ns = [](uint64_t ticks) { return uint64_t(double(ticks) * ns_per_tick); };
	return MachineCpu{ns(v[0] + v[1] + v[2] + v[5] + v[6]), ns(v[3] + v[4])};
}

std::optional<int> zombie_exit_status(uint32_t pid)
{
	auto s = read_stat(pid);
	if (!s || s->state != 'Z' || s->exit_code < 0)
		return std::nullopt;
	return shell_status(s->exit_code);
}

int shell_status(int32_t code) { return (code & 0x7f) == 0 ? (code >> 8) & 0xff : 128 + (code & 0x7f); }

Result<UniqueFd> open_live_process(uint32_t pid)
{
	std::string name = "process " + std::to_string(pid);
	auto fd = open_pidfd(pid);
	if (!fd)
		return fd.error();
	if (!*fd)
		return make_error(ErrorKind::NotFound,
				  "no process with PID " + std::to_string(pid) + "; check it with 'ps -p " +
					  std::to_string(pid) + "'");
	if (pidfd_exited(**fd)) {
		auto ppid = parent_pid(pid);
		return make_error(
			ErrorKind::NotFound,
			name + " has already exited: it is a zombie" +
				(ppid ? " that its parent (PID " + std::to_string(*ppid) + ") has not reaped" : "") +
				"; there is nothing to record");
	}
	return std::move(**fd);
}

Result<PidWatch> PidWatch::open()
{
	PidWatch w;
	w.epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
	if (!w.epoll_)
		return errno_error(errno, "epoll_create1");
	return w;
}

Result<PidState> PidWatch::add(uint32_t pid, UniqueFd pidfd)
{
	if (watching(pid))
		return PidState::alive;
	if (!pidfd) {
		auto fd = open_pidfd(pid);
		if (!fd)
			return fd.error();
		if (!*fd)
			return PidState::gone;
		pidfd = std::move(**fd);
	}
	if (pidfd_exited(pidfd))
		return PidState::exited;
	epoll_event ev = {};
	ev.events = EPOLLIN;
	ev.data.u32 = pid;
	if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, pidfd.get(), &ev) != 0)
		return errno_error(errno, "cannot watch process " + std::to_string(pid) + ": epoll_ctl");
	fds_.emplace(pid, std::move(pidfd));
	return PidState::alive;
}

void PidWatch::remove(uint32_t pid)
{
	// Closing the pidfd takes it out of the epoll set.
	fds_.erase(pid);
}

std::vector<uint32_t> PidWatch::take_exited()
{
	std::vector<uint32_t> out;
	epoll_event evs[64];
	int n;
	while ((n = epoll_wait(epoll_.get(), evs, 64, 0)) > 0) {
		for (int i = 0; i < n; i++) {
			out.push_back(evs[i].data.u32);
			remove(evs[i].data.u32);
		}
		if (n < 64)
			break;
	}
	return out;
}

} // namespace eacgm
