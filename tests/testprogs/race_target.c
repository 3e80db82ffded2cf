// SPDX-License-Identifier: Apache-2.0
/* The target of the attach race test (tests/e2e/test_attach_race.py).
 * Usage: race_target reaped|zombie|tree DELAY_MS LOG
 * Forks a child that calls tl_noop(i) about once a millisecond and appends
 * "call PID I T" to LOG for each call, T being CLOCK_MONOTONIC in ns read
 * just before the call (eacgm's clock too). On SIGUSR1 the child goes on
 * for DELAY_MS more, appends "exit T" and exits 0. The parent prints
 * "child PID", then reaps the child as soon as it exits (reaped, tree) or
 * never (zombie: the child stays a zombie, /proc/PID and all, while the
 * parent lives), and exits when its standard input closes.
 * tree: the child also starts a grandchild every 10 ms until then, each
 * calling for 100 ms (every other one after exec'ing this program as
 * "race_target loop 100 LOG"), and exits after the last of them: processes
 * appear, exec and exit throughout eacgm's attach.
 * Usage: race_target orphan N LOG GO_FILE
 * Exits 3 at once, leaving a child that logs "orphan PID", waits until
 * GO_FILE exists, then calls tl_noop(0..N-1), logging each call as above. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

static volatile sig_atomic_t go;
static int log_fd = -1;

static void on_usr1(int sig)
{
	(void)sig;
	go = 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One write per line on an O_APPEND file: lines of several processes never mix. */
static void log_line(const char *fmt, ...)
{
	char buf[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (write(log_fd, buf, (size_t)n) != n)
		_exit(3);
}

static void call(long i)
{
	uint64_t t = now_ns();
	tl_noop(i);
	log_line("call %d %ld %llu\n", (int)getpid(), i, (unsigned long long)t);
}

static void pause_ms(void)
{
	const struct timespec ms = {0, 1000000};
	nanosleep(&ms, NULL);
}

/* A grandchild: calls for `ms` milliseconds, then exits. */
static int loop(long ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;
	for (long i = 0; now_ns() < end; i++) {
		call(i);
		pause_ms();
	}
	return 0;
}

static void start_grandchild(long k, const char *log_path)
{
	pid_t g = fork();
	if (g != 0)
		return;
	if (k % 2) {
		char *args[] = {"race_target", "loop", "100", (char *)log_path, NULL};
		execv("/proc/self/exe", args);
		_exit(4);
	}
	_exit(loop(100));
}

static int child(long delay_ms, int tree, const char *log_path)
{
	uint64_t deadline = UINT64_MAX;
	for (long i = 0;; i++) {
		uint64_t t = now_ns();
		if (go && deadline == UINT64_MAX)
			deadline = t + (uint64_t)delay_ms * 1000000ull;
		if (t >= deadline)
			break;
		call(i);
		if (tree && i % 10 == 0)
			start_grandchild(i / 10, log_path);
		while (tree && waitpid(-1, NULL, WNOHANG) > 0) {
		}
		pause_ms();
	}
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {
	}
	log_line("exit %llu\n", (unsigned long long)now_ns());
	return 0;
}

static int orphan(long n, const char *log_path, const char *go_file)
{
	log_fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (log_fd < 0)
		return 3;
	if (fork() != 0)
		return 3;
	log_line("orphan %d\n", (int)getpid());
	while (access(go_file, F_OK) != 0)
		pause_ms();
	for (long i = 0; i < n; i++)
		call(i);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "orphan"))
		return orphan(atol(argv[2]), argv[3], argv[4]);
	if (argc == 4 && !strcmp(argv[1], "loop")) {
		log_fd = open(argv[3], O_WRONLY | O_APPEND | O_CLOEXEC);
		return log_fd < 0 ? 3 : loop(atol(argv[2]));
	}
	if (argc != 4 || (strcmp(argv[1], "reaped") && strcmp(argv[1], "zombie") && strcmp(argv[1], "tree"))) {
		fprintf(stderr, "usage: race_target reaped|zombie|tree DELAY_MS LOG\n");
		return 2;
	}
	log_fd = open(argv[3], O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (log_fd < 0) {
		perror(argv[3]);
		return 3;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL); /* before fork: no window where SIGUSR1 kills the child */
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 3;
	}
	if (pid == 0)
		_exit(child(atol(argv[2]), !strcmp(argv[1], "tree"), argv[3]));
	printf("child %d\n", (int)pid);
	fflush(stdout);
	if (strcmp(argv[1], "zombie") && waitpid(pid, NULL, 0) != pid)
		return 3;
	char buf[64];
	while (read(0, buf, sizeof(buf)) > 0) {
	}
	return 0;
}
