// SPDX-License-Identifier: Apache-2.0
/* Calls the test library in known patterns. Usage: testlib_calls PATTERN N
 *   noop N      N calls of tl_noop(i)
 *   nest N      N calls of tl_outer (each with two tl_inner inside)
 *   recurse N   one tl_recurse(N): N+1 nested calls
 *   eight N     N calls of tl_eight(1..8)
 *   out N       N calls of tl_out(&v, 1000+i)
 *   escape N    N calls of tl_escape (longjmp out of tl_jump_deep)
 *   cet N       N calls of tl_cet(i), then N of tl_cet_loop(3)
 *   threads N   THREADS threads (default 256), started together, each
 *               making N calls of tl_noop(i)
 * With WAIT_FILE set, it first waits until that file exists (for -p tests).
 * With GATE_AFTER=K and GATE_FILE set (noop only), it stops after K calls
 * until GATE_FILE exists: the test acts between two known halves of the run.
 * With PACE_US set (noop only), it sleeps that many microseconds after each
 * call: a recording that goes on over several of eacgm's commits. With
 * STOP_AFTER_S set too, noop stops after that many seconds or N calls,
 * whichever comes first, and prints the calls it made (bench/soak.py).
 * With EXEC_AFTER set to a command line (words split on spaces), it execs
 * that once done: a traced process that becomes another program.
 * With DLOPEN set to a library path, it loads the library then, and calls
 * through dlsym, as a program that imports late would; with LOADED_WAIT_FILE
 * too, it first waits until that file exists (the test creates it once eacgm
 * says it attached to the library: probes on a library loaded late are
 * placed after the load, and calls in between are not seen). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

static long g_calls;
static pthread_barrier_t g_start;

static void *calls_on_a_thread(void *out)
{
	long acc = 0;
	pthread_barrier_wait(&g_start); /* all at once: the threads overlap */
	for (long i = 0; i < g_calls; i++)
		acc += tl_noop(i);
	*(long *)out = acc;
	return NULL;
}

static long on_threads(long n)
{
	int count = getenv("THREADS") ? atoi(getenv("THREADS")) : 256;
	pthread_t t[1024];
	long accs[1024], acc = 0;
	if (count < 1 || count > 1024)
		count = 256;
	g_calls = n;
	pthread_barrier_init(&g_start, NULL, (unsigned)count);
	for (int k = 0; k < count; k++)
		if (pthread_create(&t[k], NULL, calls_on_a_thread, &accs[k]) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			exit(3);
		}
	for (int k = 0; k < count; k++) {
		pthread_join(t[k], NULL);
		acc += accs[k];
	}
	return acc;
}

static void exec_after(void)
{
	char *line = getenv("EXEC_AFTER"), *argv[16];
	int argc = 0;
	if (!line)
		return;
	fflush(stdout);
	line = strdup(line);
	for (char *w = strtok(line, " "); w && argc < 15; w = strtok(NULL, " "))
		argv[argc++] = w;
	argv[argc] = NULL;
	unsetenv("EXEC_AFTER");
	execv(argv[0], argv);
	perror("execv");
	exit(4);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: testlib_calls noop|nest|recurse|eight|out|escape|cet N\n");
		return 2;
	}
	const char *wait_file = getenv("WAIT_FILE");
	if (wait_file) {
		printf("waiting %d\n", getpid());
		fflush(stdout);
		while (access(wait_file, F_OK) != 0)
			usleep(10000);
	}
	long n = atol(argv[2]);
	const char *p = argv[1];
	long (*noop)(long) = tl_noop;
	const char *lib = getenv("DLOPEN");
	if (lib) {
		void *h = dlopen(lib, RTLD_NOW);
		if (!h) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 3;
		}
		noop = (long (*)(long))dlsym(h, "tl_noop");
		const char *loaded = getenv("LOADED_WAIT_FILE");
		while (loaded && access(loaded, F_OK) != 0)
			usleep(10000);
	}
	long acc = 0;
	long pace_us = getenv("PACE_US") ? atol(getenv("PACE_US")) : 0;
	double stop_after_s = getenv("STOP_AFTER_S") ? atof(getenv("STOP_AFTER_S")) : 0;
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (!strcmp(p, "noop")) {
		long i = 0;
		long gate_after = getenv("GATE_AFTER") ? atol(getenv("GATE_AFTER")) : -1;
		const char *gate = getenv("GATE_FILE");
		/* RATE: calls a second at most, each at its own deadline (a busy
		 * wait: usleep cannot wait microseconds); a call made late moves
		 * the next deadlines on rather than catching up, so the rate
		 * never exceeds RATE after the thread lost its CPU. STOP_FILE:
		 * until it exists, looked for every 1024 calls. */
		double rate = getenv("RATE") ? atof(getenv("RATE")) : 0, next = 0;
		const char *stop_file = getenv("STOP_FILE");
		if (stop_file) {
			printf("calling\n");
			fflush(stdout);
		}
		for (; i < n; i++) {
			while (gate && i == gate_after && access(gate, F_OK) != 0)
				usleep(10000);
			while (rate > 0) {
				clock_gettime(CLOCK_MONOTONIC, &now);
				double at = (double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
				if (at >= next) {
					next = (at > next + 1 / rate ? at : next) + 1 / rate;
					break;
				}
			}
			acc += noop(i);
			if (pace_us)
				usleep(pace_us);
			if (stop_file && i % 1024 == 1023 && access(stop_file, F_OK) == 0) {
				i++;
				break;
			}
			if (stop_after_s > 0 && i % 1024 == 1023) {
				clock_gettime(CLOCK_MONOTONIC, &now);
				if ((double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 >=
				    stop_after_s) {
					i++;
					break;
				}
			}
		}
		if (stop_after_s > 0 || stop_file)
			printf("calls %ld\n", i);
	} else if (!strcmp(p, "nest"))
		for (long i = 0; i < n; i++)
			acc += tl_outer(i);
	else if (!strcmp(p, "recurse"))
		acc = tl_recurse(n);
	else if (!strcmp(p, "threads"))
		acc = on_threads(n);
	else if (!strcmp(p, "eight"))
		for (long i = 0; i < n; i++)
			acc += tl_eight(1, 2, 3, 4, 5, 6, 7, 8);
	else if (!strcmp(p, "out"))
		for (long i = 0; i < n; i++) {
			uint64_t v = 0;
			acc += tl_out(&v, 1000 + i);
		}
	else if (!strcmp(p, "escape"))
		for (long i = 0; i < n; i++)
			acc += tl_escape(i);
	else if (!strcmp(p, "cet")) {
		for (long i = 0; i < n; i++)
			acc += tl_cet(i);
		for (long i = 0; i < n; i++)
			acc += tl_cet_loop(3);
	} else {
		fprintf(stderr, "unknown pattern %s\n", p);
		return 2;
	}
	printf("done %ld\n", acc);
	exec_after();
	return 0;
}
