// SPDX-License-Identifier: Apache-2.0
// Process exits as the kernel reports them through pidfds: a child that
// exits is reported once, whether its parent reaps it or leaves a zombie.
#include <gtest/gtest.h>

#include <csignal>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "probe/pid_watch.h"

using namespace eacgm;

namespace {

// A child that exits with `code` when its pipe closes (or at once).
struct Child {
	pid_t pid = -1;
	int gate = -1;
	explicit Child(int code)
	{
		int fds[2];
		EXPECT_EQ(pipe(fds), 0);
		pid = fork();
		if (pid == 0) {
			close(fds[1]);
			char c;
			while (read(fds[0], &c, 1) > 0) {
			}
			_exit(code);
		}
		close(fds[0]);
		gate = fds[1];
	}
	void let_exit()
	{
		close(gate);
		gate = -1;
	}
	// Blocks until it has exited, leaving it a zombie (not reaped).
	void wait_zombie()
	{
		siginfo_t si;
		waitid(P_PID, pid, &si, WEXITED | WNOWAIT);
	}
	void reap()
	{
		waitpid(pid, nullptr, 0);
		pid = -1;
	}
	~Child()
	{
		if (gate >= 0)
			close(gate);
		if (pid > 0)
			waitpid(pid, nullptr, 0);
	}
};

bool readable(int fd, int timeout_ms)
{
	pollfd p = {fd, POLLIN, 0};
	return poll(&p, 1, timeout_ms) == 1;
}

} // namespace

TEST(PidWatch, ReportsAnExitOnceAndWakesPoll)
{
	auto w = PidWatch::open();
	ASSERT_TRUE(w) << w.error().message;
	Child c(0);
	auto st = w->add(c.pid);
	ASSERT_TRUE(st);
	EXPECT_EQ(*st, PidState::alive);
	EXPECT_EQ(w->size(), 1u);
	EXPECT_FALSE(readable(w->fd(), 0));
	EXPECT_TRUE(w->take_exited().empty());
	c.let_exit();
	// No timing: poll blocks until the exit, however long the child takes.
	EXPECT_TRUE(readable(w->fd(), -1));
	EXPECT_EQ(w->take_exited(), std::vector<uint32_t>{uint32_t(c.pid)});
	EXPECT_EQ(w->size(), 0u);
	EXPECT_TRUE(w->take_exited().empty());
}

TEST(PidWatch, AZombieHasExitedAndKeepsItsExitStatus)
{
	Child c(7);
	c.let_exit();
	c.wait_zombie();
	auto w = PidWatch::open();
	ASSERT_TRUE(w);
	auto st = w->add(c.pid);
	ASSERT_TRUE(st);
	EXPECT_EQ(*st, PidState::exited);
	EXPECT_FALSE(w->watching(c.pid));
	EXPECT_EQ(zombie_exit_status(c.pid), 7);
	auto live = open_live_process(c.pid);
	ASSERT_FALSE(live);
	EXPECT_EQ(live.error().message,
		  "process " + std::to_string(c.pid) + " has already exited: it is a zombie that its parent (PID " +
			  std::to_string(getpid()) + ") has not reaped; there is nothing to record");
	EXPECT_EQ(live.error().kind, ErrorKind::NotFound);
}

TEST(PidWatch, AReapedProcessIsGone)
{
	Child c(0);
	pid_t pid = c.pid;
	c.let_exit();
	c.reap();
	auto w = PidWatch::open();
	ASSERT_TRUE(w);
	auto st = w->add(pid);
	ASSERT_TRUE(st);
	EXPECT_EQ(*st, PidState::gone);
	EXPECT_EQ(zombie_exit_status(pid), std::nullopt);
	auto live = open_live_process(pid);
	ASSERT_FALSE(live);
	EXPECT_EQ(live.error().message,
		  "no process with PID " + std::to_string(pid) + "; check it with 'ps -p " + std::to_string(pid) + "'");
	EXPECT_EQ(live.error().kind, ErrorKind::NotFound);
}

TEST(PidWatch, AKilledProcessReportsTheShellsNumberForItsSignal)
{
	Child c(0);
	kill(c.pid, SIGKILL);
	c.wait_zombie();
	EXPECT_EQ(zombie_exit_status(c.pid), 128 + SIGKILL);
}

TEST(PidWatch, TheGivenPidfdIsTheOneWatched)
{
	Child c(0);
	auto fd = open_live_process(c.pid);
	ASSERT_TRUE(fd) << fd.error().message;
	auto w = PidWatch::open();
	ASSERT_TRUE(w);
	ASSERT_TRUE(w->add(c.pid, std::move(fd.value())));
	// Adding it again (as a process first seen through one of its records) keeps it.
	auto again = w->add(c.pid);
	ASSERT_TRUE(again);
	EXPECT_EQ(*again, PidState::alive);
	EXPECT_EQ(w->size(), 1u);
	w->remove(c.pid);
	EXPECT_FALSE(w->watching(c.pid));
	c.let_exit();
	c.reap();
	EXPECT_FALSE(readable(w->fd(), 0)); // removed: its exit is not reported
}

// A thread's CPU as the scheduler counts it (the overhead budget weighs the
// calls' cost against their threads'): what this thread spun shows there,
// no more than the thread has run in all, and a thread that does not exist
// has none.
TEST(PidWatch, AThreadsCpuIsTheSchedulersCount)
{
	auto cpu = [] { return clock_ns(CLOCK_THREAD_CPUTIME_ID); };
	const uint32_t pid = getpid(), tid = gettid();
	auto before = thread_cpu_ns(pid, tid);
	ASSERT_TRUE(before.has_value());
	const uint64_t start = cpu();
	while (cpu() - start < 50'000'000) // 50 ms of CPU: ticks and switches update the count
		;
	auto after = thread_cpu_ns(pid, tid);
	ASSERT_TRUE(after.has_value());
	EXPECT_GT(*after, *before);
	EXPECT_LE(*after, cpu());
	EXPECT_FALSE(thread_cpu_ns(pid, 0).has_value());
	EXPECT_FALSE(thread_cpu_ns(0x7ffffff0u, 1).has_value());
}

// /proc/stat's first line: busy is user + nice + system + irq + softirq,
// idle is idle + iowait, steal neither; ticks become ns. The real file
// parses, and the machine's time grows.
TEST(PidWatch, TheMachinesCpuFromProcStat)
{
	const double tick_ns = 1e9 / double(sysconf(_SC_CLK_TCK));
	auto m = parse_machine_cpu("cpu  100 2 30 400 5 6 7 8 9 10\ncpu0 50 1 15 200 2 3 3 4 4 5\n");
	ASSERT_TRUE(m.has_value());
	EXPECT_EQ(m->busy_ns, uint64_t(145 * tick_ns));
	EXPECT_EQ(m->idle_ns, uint64_t(405 * tick_ns));
	EXPECT_FALSE(parse_machine_cpu("cpu0 1 2 3 4 5 6 7 8\n").has_value());
	EXPECT_FALSE(parse_machine_cpu("cpu  1 2 3\n").has_value());
	EXPECT_FALSE(parse_machine_cpu("").has_value());
	auto first = parse_machine_cpu(*read_small_file("/proc/stat"));
	ASSERT_TRUE(first.has_value());
	const uint64_t start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - start < 30'000'000) // 30 ms: three ticks at least
		;
	auto second = parse_machine_cpu(*read_small_file("/proc/stat"));
	ASSERT_TRUE(second.has_value());
	EXPECT_GT(second->busy_ns, first->busy_ns);
	EXPECT_GE(second->idle_ns, first->idle_ns);
}
