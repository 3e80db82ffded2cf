// SPDX-License-Identifier: Apache-2.0
// A C++ library for the exception guard's tests (tests/e2e/test_exceptions.py,
// tests/bpf/test_unwind_guard.cpp) and bench_span_cost: functions that a
// spec probes and that exceptions, forced unwinding, longjmp and backtraces
// pass through. Built like the test library (no inlining, no sibling calls,
// frame pointers: each starts with a push the kernel emulates).
#include "throwlib.h"

#include <cstdio>
#include <dlfcn.h>
#include <exception>
#include <execinfo.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdexcept>
#include <string>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, visibility("default")))

static volatile long sink;

// Says on stdout that its destructor ran: the unwinding passed its frame
// exactly as it does untraced.
struct Noisy {
	const char *what;
	~Noisy()
	{
		std::printf("cleanup %s\n", what);
		std::fflush(stdout);
	}
};

extern "C" {

NOINLINE long th_ok(long n)
{
	volatile long slot = n; // a frame: it starts with a push, as the others do
	sink = sink + slot;
	return n + 1;
}

NOINLINE long th_thrower(long n) { throw std::runtime_error("th_thrower " + std::to_string(n)); }

NOINLINE long th_middle(long n) { return th_thrower(n) + 1; }

NOINLINE long th_outer(long n) { return th_middle(n) + 1; }

NOINLINE long th_catcher(long n)
{
	try {
		return th_outer(n);
	} catch (const std::runtime_error &e) {
		return th_ok(-n); // a probed call in the handler, then a normal return
	}
}

NOINLINE long th_cleanup(long n)
{
	struct Cleanup {
		long n;
		~Cleanup() { th_ok(n); } // a probed call while the exception is in flight
	} c{n};
	return th_middle(n) + 1;
}

NOINLINE long th_rethrow(long n)
{
	try {
		return th_middle(n);
	} catch (...) {
		throw;
	}
}

NOINLINE long th_rethrow_ptr(long n)
{
	std::exception_ptr p;
	try {
		th_middle(n);
	} catch (...) {
		p = std::current_exception();
	}
	std::rethrow_exception(p); // a dependent exception, thrown anew
}

NOINLINE long th_recurse(long depth)
{
	if (depth == 0)
		return th_thrower(0);
	return th_recurse(depth - 1) + 1;
}

NOINLINE long th_count(long n) { return th_ok(n) + th_ok(n + 1); }

NOINLINE void th_exit_inner(long code) { pthread_exit(reinterpret_cast<void *>(code)); }

NOINLINE void th_exit_outer(long code)
{
	Noisy n{"th_exit_outer"};
	th_exit_inner(code);
}

NOINLINE long th_wait(int fd)
{
	Noisy n{"th_wait"};
	char c;
	return read(fd, &c, 1); // a cancellation point: pthread_cancel ends the thread here
}

static jmp_buf escape;

NOINLINE void th_jump(long n)
{
	sink = sink + n;
	longjmp(escape, 1);
}

NOINLINE long th_escape(long n)
{
	if (setjmp(escape) == 0)
		th_jump(n);
	return th_ok(n);
}

NOINLINE int th_backtrace_inner(char *names, int size)
{
	void *frames[64];
	int n = backtrace(frames, 64);
	int used = 0;
	names[0] = 0;
	for (int i = 0; i < n && used < size - 64; i++) {
		Dl_info info;
		if (dladdr(frames[i], &info) && info.dli_sname)
			used += std::snprintf(names + used, size - used, "%s ", info.dli_sname);
	}
	return n;
}

// A probed call after the walk: the frames the walk left alive are traced
// again from its entry on.
NOINLINE int th_backtrace(char *names, int size)
{
	int n = th_backtrace_inner(names, size);
	th_ok(n);
	return n;
}

} // extern "C"
