// SPDX-License-Identifier: Apache-2.0
/* The test library's functions, for the programs, tests and benchmarks that call them. */
#ifndef EACGM_TESTLIB_H
#define EACGM_TESTLIB_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
long tl_noop(long x);
long tl_leaf(long x);
long tl_inner(long x);
long tl_outer(long x);
long tl_call(long (*fn)(long), long x); /* tl_inner(fn(x)) */
long tl_recurse(long depth);
long tl_eight(long a, long b, long c, long d, long e, long f, long g, long h);
int tl_out(uint64_t *out, uint64_t value);
void tl_jump_deep(long n);
long tl_escape(long n);
long tl_cet(long x);      /* x + 1, starting with endbr64 */
long tl_cet_loop(long n); /* 0 for n >= 1, looping back past its endbr64 n times */
#ifdef __cplusplus
}
#endif
#endif
