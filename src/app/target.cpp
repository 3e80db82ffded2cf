// SPDX-License-Identifier: Apache-2.0
#include "app/target.h"
#include <sys/ptrace.h>
#include <sys/resource.h>

#include "pipeline/record_loop.h"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <linux/capability.h>
#include <map>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace eacgm {

static bool executable_file(const std::string &p)
{
	struct stat st;
	return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

Result<std::string> resolve_command(const std::string &name)
{
	if (name.empty())
		return make_error(ErrorKind::BadInput, "empty command after --");
	if (name.find('/') != std::string::npos) {
		if (!executable_file(name)) {
			const bool missing = access(name.c_str(), F_OK) != 0;
			return make_error(missing ? ErrorKind::NotFound : ErrorKind::BadInput,
					  "cannot run " + name + ": " +
						  (missing ? "no such file" : "not an executable file") +
						  "; check the path");
		}
		return name;
	}
	const char *path = getenv("PATH");
	std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
	size_t pos = 0;
	while (pos <= dirs.size()) {
		size_t colon = dirs.find(':', pos);
		std::string d = dirs.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
		std::string cand = (d.empty() ? "." : d) + "/" + name;
		if (executable_file(cand))
			return cand;
		if (colon == std::string::npos)
			break;
		pos = colon + 1;
	}
	return make_error(ErrorKind::NotFound,
			  "command not found: " + name + " (not in PATH); check the name or give its path");
}

Result<LaunchedCommand> LaunchedCommand::start(const std::vector<std::string> &argv, const std::string &exe)
{
	// Between fork and exec the child makes only async-signal-safe calls (a
	// lock some thread held at the fork would stay held in it), so everything
	// it needs (argv, the message it prints if exec fails) is made here.
	std::vector<char *> args;
	for (auto &a : argv)
		args.push_back(const_cast<char *>(a.c_str()));
	args.push_back(nullptr);
	const std::string cannot_run = "eacgm: cannot run " + exe + ": ";
	// A traced exec ignores set-user-ID and set-group-ID bits (unless the
	// tracer may trace the new credentials): such a program is not stopped.
	struct stat st;
	const bool stop_after_exec = stat(exe.c_str(), &st) == 0 && !(st.st_mode & (S_ISUID | S_ISGID));
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return errno_error(errno, "pipe");
	pid_t pid = fork();
	if (pid < 0) {
		int err = errno;
		close(fds[0]);
		close(fds[1]);
		return errno_error(err, "cannot start the command: fork");
	}
	if (pid == 0) {
		close(fds[1]);
		char go = 0;
		// Closed without a byte: eacgm failed to set up, do not run.
		if (read(fds[0], &go, 1) != 1)
			_exit(127);
		close(fds[0]);
		execv(exe.c_str(), args.data());
		const char *why = strerrordesc_np(errno); // a constant string: no locale, no allocation
		if (write(2, cannot_run.data(), cannot_run.size()) > 0 && write(2, why, strlen(why)) > 0 &&
		    write(2, "\n", 1) > 0) {
		}
		_exit(127);
	}
	close(fds[0]);
	LaunchedCommand c;
	c.pid_ = pid;
	c.gate_ = fds[1];
	c.stop_after_exec_ = stop_after_exec;
	return c;
}

LaunchedCommand::LaunchedCommand(LaunchedCommand &&o) noexcept
	: pid_(o.pid_), gate_(o.gate_), stop_after_exec_(o.stop_after_exec_), reaped_(o.reaped_), status_(o.status_)
{
	o.pid_ = -1;
	o.gate_ = -1;
}

LaunchedCommand::~LaunchedCommand()
{
	if (gate_ >= 0)
		close(gate_); // never released: the child exits 127 without running
	if (pid_ > 0 && !reaped_) {
		int st;
		if (waitpid(pid_, &st, WNOHANG) == 0 && gate_ >= 0)
			waitpid(pid_, &st, 0);
	}
}

void LaunchedCommand::release(const std::function<void()> &at_exec)
{
	if (gate_ < 0)
		return;
	// Seized before it may exec, with the exec as an event stop: a stop
	// that carries no signal. Were eacgm killed while the command is stopped
	// there, the kernel detaches it and it runs on; an exec stop of
	// PTRACE_TRACEME delivers SIGTRAP instead, and the command would die of it.
	// Where tracing is refused (a tracer already, Yama level 3) it just runs.
	bool traced = stop_after_exec_ && ptrace(PTRACE_SEIZE, pid_, nullptr, PTRACE_O_TRACEEXEC) == 0;
	char go = 1;
	if (write(gate_, &go, 1) != 1) { /* child gone: poll_exit reports it */
	}
	close(gate_);
	gate_ = -1;
	if (!traced)
		return; // not stopped after its exec: it simply runs
	// Until the exec's event stop. A signal that comes first is passed on;
	// an exit means the exec failed.
	for (;;) {
		int st;
		if (waitpid(pid_, &st, 0) != pid_)
			return;
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			reaped_ = true;
			status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			return;
		}
		int event = st >> 16;
		if (WIFSTOPPED(st) && event == PTRACE_EVENT_EXEC)
			break;
		// A group stop (PTRACE_EVENT_STOP) resumes; a signal is delivered.
		intptr_t sig = WIFSTOPPED(st) && event == 0 ? WSTOPSIG(st) : 0;
		ptrace(PTRACE_CONT, pid_, nullptr, reinterpret_cast<void *>(sig));
	}
	if (at_exec)
		at_exec();
	ptrace(PTRACE_DETACH, pid_, nullptr, nullptr);
}

bool LaunchedCommand::poll_exit(int &status)
{
	if (reaped_) {
		status = status_;
		return true;
	}
	int st;
	pid_t r = waitpid(pid_, &st, WNOHANG);
	if (r != pid_)
		return false;
	reaped_ = true;
	status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return true;
}

bool process_exists(uint32_t pid)
{
	struct stat st;
	return stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0;
}

std::vector<uint32_t> process_tree(uint32_t root)
{
	std::multimap<uint32_t, uint32_t> children;
	if (DIR *d = opendir("/proc")) {
		while (auto *e = readdir(d)) {
			char *end;
			unsigned long pid = strtoul(e->d_name, &end, 10);
			if (*end || !pid)
				continue;
			if (auto ppid = parent_pid(pid))
				children.emplace(*ppid, pid);
		}
		closedir(d);
	}
	std::vector<uint32_t> out = {root};
	for (size_t i = 0; i < out.size(); i++) {
		auto [b, e] = children.equal_range(out[i]);
		for (auto it = b; it != e; ++it)
			out.push_back(it->second);
	}
	return out;
}

Result<void> check_bpf_privileges()
{
	__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[2] = {};
	if (syscall(SYS_capget, &hdr, data) != 0)
		return errno_error(errno, "cannot read capabilities");
	auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1; };
#ifndef CAP_BPF
#define CAP_BPF 39
#define CAP_PERFMON 38
#endif
	bool bpf = has(CAP_BPF) || has(CAP_SYS_ADMIN);
	bool perfmon = has(CAP_PERFMON) || has(CAP_SYS_ADMIN);
	if (bpf && perfmon)
		return {};
	std::string missing = !bpf && !perfmon ? "CAP_BPF and CAP_PERFMON" : !bpf ? "CAP_BPF" : "CAP_PERFMON";
	return make_error(
		ErrorKind::Permission,
		"eBPF tracing needs root or " + missing +
			"; run eacgm with sudo (or grant them: setcap cap_bpf,cap_perfmon,cap_sys_resource+ep eacgm)");
}

// One pidfd per traced process (and one per thousands of short-lived
// ones): the soft limit on open files is raised to the hard one.
void raise_open_file_limit()
{
	rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

} // namespace eacgm
