// SPDX-License-Identifier: Apache-2.0
/* The exception test library's functions (throwlib.cpp): C names, C++
 * inside, so that exceptions pass through them. */
#ifndef EACGM_THROWLIB_H
#define EACGM_THROWLIB_H
#ifdef __cplusplus
extern "C" {
#endif
long th_ok(long n);                      /* n + 1 */
long th_thrower(long n);                 /* throws std::runtime_error("th_thrower N") */
long th_middle(long n);                  /* th_thrower(n): the exception passes */
long th_outer(long n);                   /* th_middle(n): the exception passes */
long th_catcher(long n);                 /* th_outer(n), caught inside: returns th_ok(-n) = 1 - n */
long th_cleanup(long n);                 /* th_middle(n) with a destructor calling th_ok(n) on the way */
long th_rethrow(long n);                 /* th_middle(n), caught and rethrown with `throw;` */
long th_rethrow_ptr(long n);             /* th_middle(n), caught, rethrown by std::rethrow_exception */
long th_recurse(long depth);             /* depth + 1 nested calls, the innermost throws */
long th_count(long n);                   /* th_ok(n) + th_ok(n + 1) */
void th_exit_outer(long code);           /* pthread_exit(code) from th_exit_inner, under a destructor */
long th_wait(int fd);                    /* read(fd): a cancellation point, under a destructor */
long th_escape(long n);                  /* longjmp out of th_jump, then th_ok(n) */
int th_backtrace(char *names, int size); /* backtrace() two probed frames down: the frames' names */
#ifdef __cplusplus
}
#endif
#endif
