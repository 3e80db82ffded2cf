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
long tl_recurse(long depth);
long tl_eight(long a, long b, long c, long d, long e, long f, long g, long h);
int tl_out(uint64_t *out, uint64_t value);
void tl_jump_deep(long n);
long tl_escape(long n);
#ifdef __cplusplus
}
#endif
#endif
