// SPDX-License-Identifier: Apache-2.0
// Calls the exception test library (throwlib.cpp) in known patterns and
// says what it saw on stdout, which must read the same traced and untraced
// (tests/e2e/test_exceptions.py compares them byte for byte).
// Usage: throw_calls PATTERN [N]
//   throw N        N times: th_outer(i) throws through three frames, caught here; th_count between
//   catch N        N calls of th_catcher(i): caught inside a probed frame, which returns
//   cleanup N      N times th_cleanup(i): a destructor makes a probed call while the exception passes
//   rethrow N      N times th_rethrow(i): caught and rethrown by `throw;`
//   rethrow_ptr N  N times th_rethrow_ptr(i): rethrown by std::rethrow_exception
//   nested N       th_recurse(N): N + 1 probed frames, the innermost throws
//   threads N      8 threads at once, each `throw N` (several threads of one process unwinding together)
//   exit N         N threads, each leaving by pthread_exit(i) two probed frames down
//   cancel N       N threads blocked in a probed read(), each cancelled
//   longjmp N      N calls of th_escape(i): longjmp out of a probed frame
//   backtrace N    N backtraces two probed frames down: the names of the frames
//   uncaught       th_outer(7), caught by nobody: std::terminate, exit 134
//   time N         N throws through th_outer and nothing else; prints the wall time of one
//                  (CLOCK_MONOTONIC, ns) for bench_span_cost
// With WAIT_FILE set, it first waits until that file exists (for -p tests).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <stdexcept>
#include <string>
#include <ctime>
#include <thread>
#include <unistd.h>
#include <vector>

#include "throwlib.h"

namespace {

// n throws through th_outer, each said on stdout where `loud`.
long throws(long n, bool loud)
{
	long caught = 0;
	for (long i = 0; i < n; i++) {
		try {
			th_outer(i);
		} catch (const std::runtime_error &e) {
			if (loud)
				std::printf("caught %s\n", e.what());
			caught++;
		}
		th_count(i);
	}
	return caught;
}

template <typename F>
void each(long n, const char *what, F f)
{
	for (long i = 0; i < n; i++) {
		try {
			std::printf("%s(%ld) returned %ld\n", what, i, f(i));
		} catch (const std::exception &e) {
			std::printf("%s(%ld) threw %s\n", what, i, e.what());
		}
	}
}

void *exiting(void *arg)
{
	th_exit_outer(reinterpret_cast<long>(arg));
	return nullptr; // not reached
}

void *waiting(void *arg) { return reinterpret_cast<void *>(th_wait(*static_cast<int *>(arg))); }

void threads_exit(long n)
{
	for (long i = 0; i < n; i++) {
		pthread_t t;
		pthread_create(&t, nullptr, exiting, reinterpret_cast<void *>(i + 40));
		void *ret;
		pthread_join(t, &ret);
		std::printf("thread %ld exited with %ld\n", i, reinterpret_cast<long>(ret));
	}
}

void threads_cancel(long n)
{
	for (long i = 0; i < n; i++) {
		int fds[2];
		if (pipe(fds) != 0)
			return;
		pthread_t t;
		pthread_create(&t, nullptr, waiting, &fds[0]);
		// Cancelled wherever it is: before read() or blocked in it, the
		// cancellation takes it at read() (deferred cancellation).
		pthread_cancel(t);
		void *ret;
		pthread_join(t, &ret);
		std::printf("thread %ld %s\n", i, ret == PTHREAD_CANCELED ? "cancelled" : "returned");
		close(fds[0]), close(fds[1]);
	}
}

void wait_for_file()
{
	const char *f = std::getenv("WAIT_FILE");
	while (f && access(f, F_OK) != 0)
		usleep(1000);
}

} // namespace

int main(int argc, char **argv)
{
	std::setvbuf(stdout, nullptr, _IOLBF, 0);
	if (argc < 2)
		return 2;
	wait_for_file();
	const std::string p = argv[1];
	const long n = argc > 2 ? std::atol(argv[2]) : 3;
	if (p == "throw")
		throws(n, true);
	else if (p == "catch")
		each(n, "th_catcher", th_catcher);
	else if (p == "cleanup")
		each(n, "th_cleanup", th_cleanup);
	else if (p == "rethrow")
		each(n, "th_rethrow", th_rethrow);
	else if (p == "rethrow_ptr")
		each(n, "th_rethrow_ptr", th_rethrow_ptr);
	else if (p == "nested")
		each(1, "th_recurse", [n](long) { return th_recurse(n); });
	else if (p == "threads") {
		std::vector<std::thread> ts;
		std::vector<long> caught(8);
		for (int t = 0; t < 8; t++)
			ts.emplace_back([&, t] { caught[t] = throws(n, false); });
		for (auto &t : ts)
			t.join();
		long all = 0;
		for (long c : caught)
			all += c;
		std::printf("threads caught %ld\n", all);
	} else if (p == "exit")
		threads_exit(n);
	else if (p == "cancel")
		threads_cancel(n);
	else if (p == "longjmp")
		each(n, "th_escape", th_escape);
	else if (p == "backtrace")
		for (long i = 0; i < n; i++) {
			char names[4096];
			th_backtrace(names, sizeof names);
			std::printf("backtrace %s\n", names);
		}
	else if (p == "uncaught")
		th_outer(7);
	else if (p == "time") {
		timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (long i = 0; i < n; i++)
			try {
				th_outer(i);
			} catch (const std::runtime_error &) {
			}
		clock_gettime(CLOCK_MONOTONIC, &b);
		std::printf("ns per throw %.0f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / double(n));
	} else
		return 2;
	return 0;
}
