/* SPDX-License-Identifier: GPL-2.0 */
/* arm64: what the BPF programs read differently on each processor (the
 * x86-64 counterpart is bpf/arch/x86/arch.bpf.h; the build puts the target's
 * directory first on the include path, with its vmlinux.h). */
#ifndef EACGM_ARCH_BPF_H
#define EACGM_ARCH_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "eacgm/abi/events.h" /* EACGM_SLOT_RESULT */

/* An argument word at a function's entry (eacgm_arg_spec.slot: the slot-th
 * integer or pointer word, from 0). AAPCS64 passes eight in x0..x7 and the
 * rest on the stack from the stack pointer up: `bl` leaves the return
 * address in x30, not on the stack. A uprobe's context is the user
 * registers (struct user_pt_regs: x0..x30, sp, pc, pstate); libbpf 1.1
 * names only the first five arguments, so the rest are read by index. */
static __always_inline __u64 eacgm_arg_word(struct pt_regs *ctx, __u32 slot)
{
	if (slot == EACGM_SLOT_RESULT)
		return ((const struct user_pt_regs *)ctx)->regs[8]; /* x8, the indirect result register */
	const struct user_pt_regs *r = (const struct user_pt_regs *)ctx;
	switch (slot) {
	case 0: return r->regs[0];
	case 1: return r->regs[1];
	case 2: return r->regs[2];
	case 3: return r->regs[3];
	case 4: return r->regs[4];
	case 5: return r->regs[5];
	case 6: return r->regs[6];
	case 7: return r->regs[7];
	}
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(r->sp + 8 * (__u64)(slot - 8)));
	return v;
}

/* At a return probe, the stack pointer the function had at its entry probe:
 * nothing was pushed by the call, and the function has given back what it
 * took, so it is the same. Entry and return are paired by it. */
static __always_inline __u64 eacgm_entry_sp_at_return(struct pt_regs *ctx)
{
	return ((const struct user_pt_regs *)ctx)->sp;
}

/* The thread pointer of a task's user code: tpidr_el0, as the kernel saved
 * it in thread.uw.tp_value (at clone with CLONE_SETTLS, and each time the
 * task leaves a CPU). glibc's struct pthread lies just below it. A thread
 * that set the register itself (glibc does, for the main thread, at start)
 * shows the value only after its first switch, which the walker's target,
 * a Python thread that has run for a while, has long made. */
static __always_inline __u64 eacgm_thread_pointer(struct task_struct *task)
{
	return BPF_CORE_READ(task, thread.uw.tp_value);
}

/* Where a frame's return address is while its return probe is live: on
 * arm64 the kernel replaces the link register (x30) at the entry probe, and
 * the function saves it wherever its prologue chooses, which only its
 * unwind information says. The exception guard cannot find it, so it is
 * not built here (user space knows: arch::IsaRules, and refuses return
 * probes on libraries that throw; docs/arm64.md). */
#define EACGM_RETURN_ON_STACK 0

static __always_inline bool eacgm_shadow_stack(struct task_struct *task) { return false; }

/* glibc on arm64 mangles the jmp_buf's stack pointer with a guard kept in
 * ld.so's own data (__pointer_chk_guard_local), not in the thread's: not
 * read here. 0: unknown, and frames a longjmp left are found at the next
 * entry as on any kernel (counted, not recorded). */
static __always_inline __u64 eacgm_longjmp_target_sp(struct pt_regs *ctx, struct task_struct *task) { return 0; }

#endif
