// SPDX-License-Identifier: Apache-2.0
// x86-64: how the kernel takes a uprobe (arch/x86/kernel/uprobes.c), and,
// when eacgm is built for x86-64, its dynamic linker, CUDA directory and the
// function the trap is timed on.
#include "arch/arch.h"

namespace eacgm::arch {

namespace {

// A `push` of a register and a relative call, jump or conditional jump are
// emulated: the trap costs about 0.7 us here. Anything else is copied out of
// line and single-stepped, about 15 us here (bench_span_cost,
// "single-stepped"). Functions built with frame pointers start with a push
// of the frame pointer (libcudart's, libnccl's and libtorch's entry points
// do); an optimised leaf function often does not.
Trap x86_trap(csh h, const cs_insn &insn)
{
	const cs_x86 &x = insn.detail->x86;
	if (insn.id == X86_INS_PUSH)
		return x.op_count == 1 && x.operands[0].type == X86_OP_REG ? Trap::Emulated : Trap::Stepped;
	// Relative branches: the kernel computes the target itself.
	bool branch = cs_insn_group(h, &insn, CS_GRP_JUMP) || cs_insn_group(h, &insn, CS_GRP_CALL);
	return branch && x.op_count == 1 && x.operands[0].type == X86_OP_IMM ? Trap::Emulated : Trap::Stepped;
}

std::optional<uint64_t> x86_direct_target(csh h, const cs_insn &insn)
{
	const cs_x86 &x = insn.detail->x86;
	bool branch = cs_insn_group(h, &insn, CS_GRP_JUMP) || cs_insn_group(h, &insn, CS_GRP_CALL);
	if (branch && x.op_count == 1 && x.operands[0].type == X86_OP_IMM)
		return static_cast<uint64_t>(x.operands[0].imm);
	return std::nullopt;
}

// endbr64 marks where an indirect branch may land and does nothing else; the
// kernel single-steps it (a trap 29x dearer here: 23 us against 0.8 us), and
// code built with -fcf-protection (Ubuntu's packages, libcuda, libnccl)
// starts every function with it.
constexpr uint8_t kEndbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};

} // namespace

extern const IsaRules kX86_64Rules = {
	.name = "x86-64",
	.disasm_arch = CS_ARCH_X86,
	.disasm_mode = CS_MODE_64,
	.max_insn = 16, // the longest x86 instruction is 15 bytes
	.landing_pad = kEndbr64,
	.trap = x86_trap,
	.direct_target = x86_direct_target,
	.stepped_cost = "about 20x the trap of one that starts with a push or a relative branch",
	.result_pointer_words = 1,       // rdi, then the declared arguments from rsi
	.return_address_on_stack = true, // `call` pushed it: the slot the kernel replaces
	.elf_machine = 62,               // EM_X86_64
};

#if defined(__x86_64__)

const char *dynamic_linker() { return "/lib64/ld-linux-x86-64.so.2"; }

const char *cuda_target_dir() { return "x86_64-linux"; }

#endif

} // namespace eacgm::arch

#if defined(__x86_64__)
// Starts with `push %rbp` like the frame-pointer functions of real libraries
// (the kernel emulates it: one trap).
__asm__(".pushsection .text\n"
	".globl eacgm_probes_cost_target\n"
	".type eacgm_probes_cost_target, @function\n"
	".p2align 4\n"
	"eacgm_probes_cost_target:\n"
	"  push %rbp\n"
	"  mov %rsp, %rbp\n"
	"  lea 1(%rdi), %rax\n"
	"  pop %rbp\n"
	"  ret\n"
	".size eacgm_probes_cost_target, . - eacgm_probes_cost_target\n"
	".popsection\n");
#endif
