// SPDX-License-Identifier: Apache-2.0
/* A library for tests and benchmarks to probe: functions with known call
 * patterns (nesting, recursion, stack arguments, out-pointers, longjmp). */
#include <setjmp.h>
#include <stdint.h>

#include "testlib.h"

#define NOINLINE __attribute__((noinline, visibility("default")))

/* Keeps calls from being folded away. */
static volatile long sink;

/* The stack slot gives it a frame, so it starts as the functions of real
 * libraries do (see CMakeLists.txt). */
NOINLINE long tl_noop(long x)
{
	volatile long slot = x;
	return slot;
}

/* No frame: its first instruction (mov) is single-stepped at a uprobe. */
NOINLINE long tl_leaf(long x)
{
	__asm__ volatile("" ::: "memory");
	return x;
}

NOINLINE long tl_inner(long x)
{
	sink += x;
	return x + 1;
}

NOINLINE long tl_outer(long x) { return tl_inner(x) + tl_inner(x + 1); }

/* fn(x), then tl_inner of its result: from Python (ctypes), Python code runs
 * inside this call, and the call after it is made from the caller's frame
 * again. */
NOINLINE long tl_call(long (*fn)(long), long x) { return tl_inner(fn(x)); }

/* Recurses depth times; each level is a separate traced call. */
NOINLINE long tl_recurse(long depth)
{
	if (depth <= 0)
		return 0;
	long r = tl_recurse(depth - 1) + 1;
	sink += r; /* not a tail call */
	return r;
}

/* Eight integer arguments: the last two travel on the stack. */
NOINLINE long tl_eight(long a, long b, long c, long d, long e, long f, long g, long h)
{
	return a + b + c + d + e + f + g + h;
}

/* Writes through an out-pointer, like cudaMalloc. */
NOINLINE int tl_out(uint64_t *out, uint64_t value)
{
	*out = value;
	return 7;
}

static jmp_buf escape;
NOINLINE void tl_jump_deep(long n)
{
	sink += n;
	longjmp(escape, 1);
}
/* Enters tl_jump_deep, which never returns normally: its span is unpaired. */
NOINLINE long tl_escape(long n)
{
	if (setjmp(escape) == 0)
		tl_jump_deep(n);
	return n;
}

/* As code built with control-flow protection starts: the landing pad
 * (src/arch: IsaRules::landing_pad), then code the kernel emulates, so
 * eacgm probes past the pad. */
#if defined(__x86_64__)
__asm__(".pushsection .text\n"
	".globl tl_cet\n"
	".type tl_cet, @function\n"
	"tl_cet:\n"
	"  endbr64\n"
	"  push %rbp\n"
	"  mov %rsp, %rbp\n"
	"  lea 1(%rdi), %rax\n"
	"  pop %rbp\n"
	"  ret\n"
	".size tl_cet, . - tl_cet\n"
	/* Loops back to the instruction after its endbr64 n times: a probe
	 * there would take each pass for a call, so it stays on endbr64. */
	".globl tl_cet_loop\n"
	".type tl_cet_loop, @function\n"
	"tl_cet_loop:\n"
	"  endbr64\n"
	"1:\n"
	"  push %rbp\n"
	"  pop %rbp\n"
	"  dec %rdi\n"
	"  jg 1b\n"
	"  mov %rdi, %rax\n"
	"  ret\n"
	".size tl_cet_loop, . - tl_cet_loop\n"
	".popsection\n");
#elif defined(__aarch64__)
/* -mbranch-protection's `bti c`, then a branch (simulated) where x86-64 has
 * its push; the same results as there. */
__asm__(".pushsection .text\n"
	".globl tl_cet\n"
	".type tl_cet, %function\n"
	"tl_cet:\n"
	"  hint #34\n" /* bti c, in any assembler */
	"  b 1f\n"
	"1:\n"
	"  add x0, x0, #1\n"
	"  ret\n"
	".size tl_cet, . - tl_cet\n"
	/* Loops back to the instruction after its `bti c` n times: a probe
	 * there would take each pass for a call, so it stays on the pad. */
	".globl tl_cet_loop\n"
	".type tl_cet_loop, %function\n"
	"tl_cet_loop:\n"
	"  hint #34\n" /* bti c, in any assembler */
	"1:\n"
	"  b 2f\n"
	"2:\n"
	"  subs x0, x0, #1\n"
	"  b.gt 1b\n"
	"  ret\n"
	".size tl_cet_loop, . - tl_cet_loop\n"
	".popsection\n");
#else
#error "tl_cet and tl_cet_loop are written for x86-64 and arm64"
#endif
