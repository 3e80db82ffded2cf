// SPDX-License-Identifier: Apache-2.0
/* The overhead budget's library (budget_load calls it): apart from the test
 * library, whose exact set of functions other tests list. Built like it, so
 * each function starts by saving the frame pointer (see CMakeLists.txt). */
#include "budgetlib.h"

#define NOINLINE __attribute__((noinline, visibility("default")))

/* About `iters` dependent additions: a hot function with a body. */
NOINLINE long bl_work(long iters)
{
	volatile long acc = 0;
	for (long i = 0; i < iters; i++)
		acc = acc + i;
	return acc;
}

NOINLINE long bl_light(long x)
{
	volatile long slot = x;
	return slot;
}
