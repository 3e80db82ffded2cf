// SPDX-License-Identifier: Apache-2.0
/* The overhead budget's library, for budget_load. */
#ifndef EACGM_BUDGETLIB_H
#define EACGM_BUDGETLIB_H
long bl_work(long iters);
long bl_light(long x);
#endif
