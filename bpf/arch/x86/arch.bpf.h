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

#endif
