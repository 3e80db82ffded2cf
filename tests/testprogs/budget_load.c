/* A hot traced function, for --overhead-budget. Usage: budget_load SECONDS ITERS
 * Calls bl_work(ITERS) for SECONDS of wall time, and bl_light once every
 * 1000 of those calls. Prints one line of JSON: the calls it made and, per
 * second of wall time, the bl_work calls and the CPU time this thread used
 * (a trap into the kernel is CPU time of the thread that hits it: calls per
 * CPU second measure what tracing costs, whatever else the machine runs). */
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

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: budget_load SECONDS ITERS\n");
		return 2;
	}
	int seconds = atoi(argv[1]);
	long iters = atol(argv[2]);
	long long work = 0, light = 0;
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
	printf("], \"work_calls\": %lld, \"light_calls\": %lld}\n", work, light);
	return 0;
}
