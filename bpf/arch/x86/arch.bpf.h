/* SPDX-License-Identifier: GPL-2.0 */
/* x86-64: what the BPF programs read differently on each processor (the
 * arm64 counterpart is bpf/arch/arm64/arch.bpf.h; the build puts the
 * target's directory first on the include path, with its vmlinux.h). */
#ifndef EACGM_ARCH_BPF_H
#define EACGM_ARCH_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "eacgm/abi/events.h" /* EACGM_SLOT_RESULT */

/* An argument word at a function's entry (eacgm_arg_spec.slot: the slot-th
 * integer or pointer word, from 0). The SysV ABI passes six in registers,
 * rdi rsi rdx rcx r8 r9, and the rest on the stack above the return address
 * that `call` pushed. */
static __always_inline __u64 eacgm_arg_word(struct pt_regs *ctx, __u32 slot)
{
	if (slot == EACGM_SLOT_RESULT)
		return PT_REGS_PARM1(ctx); /* the first word, rdi */
	switch (slot) {
	case 0: return PT_REGS_PARM1(ctx);
	case 1: return PT_REGS_PARM2(ctx);
	case 2: return PT_REGS_PARM3(ctx);
	case 3: return PT_REGS_PARM4(ctx);
	case 4: return PT_REGS_PARM5(ctx);
	case 5: return ctx->r9; /* libbpf 1.1 has no PT_REGS_PARM6 */
	}
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 + 8 * (__u64)(slot - 6)));
	return v;
}

/* At a return probe, the stack pointer the function had at its entry probe:
 * `ret` has popped the return address, so it is 8 bytes lower. Entry and
 * return are paired by it. */
static __always_inline __u64 eacgm_entry_sp_at_return(struct pt_regs *ctx) { return PT_REGS_SP(ctx) - 8; }

/* The thread pointer of a task's user code: the fs base, where glibc's
 * struct pthread is (so pthread_self() equals it). */
static __always_inline __u64 eacgm_thread_pointer(struct task_struct *task)
{
	return BPF_CORE_READ(task, thread.fsbase);
}

/* Where a frame's return address is while its return probe is live: the
 * kernel's return_instance.stack is the stack pointer at the entry probe,
 * and on x86-64 that is the very slot `call` pushed the return address to,
 * which the kernel replaced with its trampoline. The exception guard writes
 * the address back there before an unwinder reads the stack (span.bpf.c). */
#define EACGM_RETURN_ON_STACK 1

/* Whether the task runs with a user shadow stack (x86 CET, 6.6+ kernels that
 * have it: thread.features & ARCH_SHSTK_SHSTK). The kernel puts its
 * trampoline on the shadow stack too, which no BPF helper can write: the
 * guard then leaves the stack alone. The field is read where the running
 * kernel has it (this kernel's vmlinux.h does not: a flavour of our own). */
struct thread_struct___shstk {
	unsigned long features;
} __attribute__((preserve_access_index));
struct task_struct___shstk {
	struct thread_struct___shstk thread;
} __attribute__((preserve_access_index));

static __always_inline bool eacgm_shadow_stack(struct task_struct *task)
{
	struct task_struct___shstk *t = (void *)task;
	if (!bpf_core_field_exists(t->thread.features))
		return false;
	return BPF_CORE_READ(t, thread.features) & 1; /* ARCH_SHSTK_SHSTK */
}

/* The stack pointer a longjmp(env, ...) goes back to, at the entry of glibc's
 * longjmp, siglongjmp or __longjmp_chk: the jmp_buf's JB_RSP word (the
 * seventh), which glibc keeps mangled (PTR_MANGLE: xor with the thread's
 * pointer guard, tcbhead_t.pointer_guard at fs:0x30, then rotate left by
 * 17). 0 when it cannot be read. */
static __always_inline __u64 eacgm_longjmp_target_sp(struct pt_regs *ctx, struct task_struct *task)
{
	__u64 env = PT_REGS_PARM1(ctx), mangled = 0, guard = 0;
	__u64 tp = BPF_CORE_READ(task, thread.fsbase);
	if (!env || !tp || bpf_probe_read_user(&mangled, sizeof(mangled), (void *)(env + 6 * 8)) ||
	    bpf_probe_read_user(&guard, sizeof(guard), (void *)(tp + 0x30)))
		return 0;
	return ((mangled >> 17) | (mangled << 47)) ^ guard;
}

#endif
