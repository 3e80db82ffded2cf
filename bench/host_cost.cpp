// SPDX-License-Identifier: Apache-2.0
// The host layer's cost at a high scheduling-event rate, measured in one run:
// two threads of a traced process ping-pong one byte over two pipes, both
// pinned to CPU 0, so every round trip is two context switches and two
// wakeups (the events the layer handles most). Rounds:
//   off   no host layer loaded
//   on    the host layer loaded, the process traced, collect() every 50 ms
//   off   again, so that drift of the machine shows
// Printed: round trips/s per round and the ratio on/off; the layer's cost as
// a percentage of one core (BPF run time of its programs from
// bpf_prog_info.run_time_ns plus the collector's CPU time, over wall time:
// the mean of its host_layer_cpu_pct metric), and the collector's part alone.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "layers/host.h"
#include "probe/proc_tracker.h"

using namespace eacgm;

static uint64_t clock_ns(clockid_t c)
{
	timespec ts{};
	clock_gettime(c, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

static void die(const std::string &m)
{
	fprintf(stderr, "bench_host_cost: %s\n", m.c_str());
	exit(1);
}

static void pin0()
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

// A child that waits for "go", ping-pongs for `seconds` and writes back the
// number of round trips.
struct PingPong {
	pid_t pid;
	int go, result;
};

static PingPong start_pingpong(double seconds)
{
	int go[2], res[2];
	if (pipe(go) || pipe(res))
		die("pipe failed");
	pid_t pid = fork();
	if (pid < 0)
		die("fork failed");
	if (pid == 0) {
		close(go[1]);
		close(res[0]);
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		pin0();
		int ab[2], ba[2];
		if (pipe(ab) || pipe(ba))
			_exit(1);
		pid_t echo = fork(); // the partner: a thread would do too, a process is simpler here
		if (echo == 0) {
			close(ab[1]);
			close(ba[0]);
			pin0();
			while (read(ab[0], &c, 1) == 1 && write(ba[1], &c, 1) == 1)
				;
			_exit(0);
		}
		close(ab[0]);
		close(ba[1]);
		uint64_t end = clock_ns(CLOCK_MONOTONIC) + uint64_t(seconds * 1e9);
		uint64_t n = 0;
		while (clock_ns(CLOCK_MONOTONIC) < end) {
			if (write(ab[1], "x", 1) != 1 || read(ba[0], &c, 1) != 1)
				_exit(1);
			n++;
		}
		close(ab[1]);
		waitpid(echo, nullptr, 0);
		if (write(res[1], &n, sizeof(n)) != sizeof(n))
			_exit(1);
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	return {pid, go[1], res[0]};
}

static double finish_pingpong(PingPong p, double seconds)
{
	uint64_t n = 0;
	if (read(p.result, &n, sizeof(n)) != sizeof(n))
		die("the ping-pong child failed");
	waitpid(p.pid, nullptr, 0);
	close(p.go);
	close(p.result);
	return n / seconds;
}

static double run_off(double seconds)
{
	PingPong p = start_pingpong(seconds);
	if (write(p.go, "g", 1) != 1)
		die("cannot start the child");
	return finish_pingpong(p, seconds);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	double off1 = run_off(seconds);

	auto tracker = ProcTracker::open(false);
	if (!tracker)
		die(tracker.error().message);
	HostOptions o;
	auto layer = open_host_collector((*tracker)->traced_map_fd(), o);
	if (!layer)
		die(layer.error().message);
	Collector &c = **layer;
	PingPong p = start_pingpong(seconds);
	if (auto r = (*tracker)->track(p.pid); !r)
		die(r.error().message);
	std::vector<Metric> metrics;
	std::vector<Event> events;
	uint64_t collect_cpu = 0, t0 = clock_ns(CLOCK_MONOTONIC);
	if (write(p.go, "g", 1) != 1)
		die("cannot start the child");
	// Collect every 50 ms as the record loop does, until the child writes
	// its result.
	for (pollfd pf{p.result, POLLIN, 0}; !poll(&pf, 1, 50);) {
		uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		c.collect(clock_ns(CLOCK_MONOTONIC), {uint32_t(p.pid)}, metrics, events);
		collect_cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	}
	uint64_t wall = clock_ns(CLOCK_MONOTONIC) - t0;
	c.stop();
	c.collect(clock_ns(CLOCK_MONOTONIC), {uint32_t(p.pid)}, metrics, events);
	double on = finish_pingpong(p, seconds);
	layer->reset();
	double off2 = run_off(seconds);

	double pct_sum = 0, switches = 0;
	int intervals = 0;
	for (auto &m : metrics) {
		if (m.name == "host_layer_cpu_pct")
			pct_sum += m.value, intervals++;
		if (m.name == "switches_voluntary" || m.name == "switches_involuntary")
			switches += m.value;
	}
	double off = (off1 + off2) / 2;
	printf("host layer cost, ping-pong of two processes over pipes on CPU 0, %.1f s per round\n", seconds);
	printf("  round trips/s   off %.0f   on %.0f   off %.0f   on/off %.3f\n", off1, on, off2, on / off);
	printf("  switches/s of the traced processes seen by the layer: %.0f (%.0f switches)\n",
	       switches / (wall / 1e9), switches);
	printf("  layer cost (BPF run time + collector), %% of one core: %.2f (mean of %d intervals)\n",
	       intervals ? pct_sum / intervals : 0.0, intervals);
	printf("  of which the collector: %.3f %%\n", 100.0 * collect_cpu / wall);
	return 0;
}
