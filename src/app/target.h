// SPDX-License-Identifier: Apache-2.0
// The processes a recording watches: a command eacgm starts, held at a gate
// until the probes are in place, or a running process and its descendants.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "common/result.h"

namespace eacgm {

// The executable a command name runs (PATH lookup like execvp).
Result<std::string> resolve_command(const std::string &name);

// A child forked and waiting at a gate; release() lets it exec the command.
// release() seizes it first (PTRACE_SEIZE, PTRACE_O_TRACEEXEC), so the
// kernel stops it right after the exec: release() runs `at_exec` while it
// is stopped there (eacgm reads its name, command line and maps: a command
// that ends within a millisecond is otherwise gone before it is read, with
// its kernels' names), then detaches. Nothing is traced after that. A
// set-user-ID or set-group-ID program is not stopped: a traced exec could
// run it without its privileges.
class LaunchedCommand {
public:
	static Result<LaunchedCommand> start(const std::vector<std::string> &argv, const std::string &exe);
	LaunchedCommand(LaunchedCommand &&o) noexcept;
	~LaunchedCommand();
	pid_t pid() const { return pid_; }
	void release(const std::function<void()> &at_exec = {});
	// Non-blocking: true once the child has exited; status is then the
	// shell-style exit code (128+signal for a signal).
	bool poll_exit(int &status);

private:
	LaunchedCommand() = default;
	pid_t pid_ = -1;
	int gate_ = -1; // write end: one byte releases, closing aborts
	bool stop_after_exec_ = false;
	bool reaped_ = false;
	int status_ = 0; // when reaped in release() (the exec failed)
};

// pid and every process below it now.
std::vector<uint32_t> process_tree(uint32_t pid);
bool process_exists(uint32_t pid);

// True with root, or with CAP_BPF and CAP_PERFMON; message says what is missing.
Result<void> check_bpf_privileges();

// One pidfd per traced process (and one per thousands of short-lived
// ones): the soft limit on open files is raised to the hard one.
void raise_open_file_limit();

} // namespace eacgm
