// SPDX-License-Identifier: Apache-2.0
/* A hot traced function, for --overhead-budget.
 * Usage: budget_load SECONDS WORK_NS|iITERATIONS [spin]
 * Calls bl_work for SECONDS of wall time, each call about WORK_NS of CPU
 * work on this machine, and bl_light once every 1000 of those calls. Prints
 * one line of JSON: the calls it made, the iterations a call does and, per
 * second of wall time, the bl_work calls and the CPU time this thread used
 * (a trap is CPU time of the thread that hits it: calls per CPU second
 * measure what tracing costs, whatever else the machine runs).
 *
 * The iterations are timed at start, on bl_work itself (those calls count
 * among the calls made): a dependent addition through memory took 1.8 ns on
 * one of these VMs (Xeon) and 0.3 ns on another (EPYC), so a fixed count
 * made a call 55 us on one and 10 us on the other, and the share a trap
 * costs with it (what the budget acts on) 6x apart. A copy of the loop
 * elsewhere is no yardstick: placed apart, the same instructions ran in a
 * third of the time. "i" and a count instead of WORK_NS takes that count
 * as given: bench/budget_cost.py times it once and gives every process the
 * same work (timed in each, it came out a quarter apart between processes
 * on a VM whose speed jumps, and a whole configuration's rounds with it).
 *
 * With "spin", a second thread spins on the CPU throughout, making no
 * traced call (as OpenBLAS's workers wait busily beside a training loop):
 * the process then uses twice the CPU of the thread the traps slow. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "budgetlib.h"

static long long ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The iterations of about work_ns of CPU: the best of kTimings long calls
 * (a trap's microsecond is lost in their milliseconds). */
enum { kTimings = 7 };
static long iterations_for(long work_ns)
{
	const long probe = 1000000;
	long long best = -1;
	for (int i = 0; i < kTimings; i++) {
		long long t0 = ns(CLOCK_THREAD_CPUTIME_ID);
		bl_work(probe);
		long long t = ns(CLOCK_THREAD_CPUTIME_ID) - t0;
		if (best < 0 || t < best)
			best = t;
	}
	long iters = (long)((double)work_ns * probe / (double)(best > 0 ? best : 1));
	return iters > 0 ? iters : 1;
}

static volatile int stop_spinning;

static void *spin(void *arg)
{
	(void)arg;
	while (!stop_spinning)
		;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: budget_load SECONDS WORK_NS|iITERATIONS [spin]\n");
		return 2;
	}
	int seconds = atoi(argv[1]);
	int given = argv[2][0] == 'i'; /* iterations given, not timed here */
	long iters = given ? atol(argv[2] + 1) : iterations_for(atol(argv[2]));
	if (iters < 1) {
		fprintf(stderr, "budget_load: iterations must be at least 1, not %s\n", argv[2] + 1);
		return 2;
	}
	pthread_t spinner;
	int spinning = argc > 3 && pthread_create(&spinner, NULL, spin, NULL) == 0;
	long long work = given ? 0 : kTimings, light = 0; /* the timing calls count among those made */
	printf("{\"windows\": [");
	long long start = ns(CLOCK_MONOTONIC);
	for (int w = 0; w < seconds; w++) {
		long long calls = 0, cpu0 = ns(CLOCK_THREAD_CPUTIME_ID);
		long long end = start + (w + 1) * 1000000000LL;
		while (ns(CLOCK_MONOTONIC) < end) {
			for (int k = 0; k < 100; k++) {
				bl_work(iters);
				if (++work % 1000 == 0) {
					bl_light(work);
					light++;
				}
			}
			calls += 100;
		}
		printf("%s[%lld, %lld]", w ? ", " : "", calls, ns(CLOCK_THREAD_CPUTIME_ID) - cpu0);
	}
	stop_spinning = 1;
	if (spinning)
		pthread_join(spinner, NULL);
	printf("], \"work_calls\": %lld, \"light_calls\": %lld, \"iters\": %ld, \"spinning\": %d}\n", work, light,
	       iters, spinning);
	return 0;
}
