// SPDX-License-Identifier: Apache-2.0
// arm64 (AArch64): how the kernel takes a uprobe (arch/arm64/kernel/probes/:
// decode-insn.c sorts an instruction, simulate-insn.c does the ones it
// simulates, uprobes.c refuses the rest), and, when eacgm is built for arm64,
// its dynamic linker, CUDA directory and the function the trap is timed on.
//
// Every instruction is one little-endian 32-bit word, so the kernel sorts
// them by their encoding's fixed bits, and so does this file (capstone only
// names them): the masks below are the Arm ARM's encoding classes.
#include "arch/arch.h"

#include <cstring>

namespace eacgm::arch {

namespace {

uint32_t word(const cs_insn &insn)
{
	uint32_t w;
	std::memcpy(&w, insn.bytes, sizeof w); // the host is little-endian, as arm64 code is
	return w;
}

bool matches(uint32_t w, uint32_t mask, uint32_t value) { return (w & mask) == value; }

// PC-relative branches, whose target the kernel computes: simulated.
bool is_b_or_bl(uint32_t w) { return matches(w, 0x7c000000, 0x14000000); }
bool is_b_cond(uint32_t w) { return matches(w, 0xff000010, 0x54000000); }
bool is_cbz_cbnz(uint32_t w) { return matches(w, 0x7e000000, 0x34000000); }
bool is_tbz_tbnz(uint32_t w) { return matches(w, 0x7e000000, 0x36000000); }
// br, blr and ret (not their pointer-authenticating forms): simulated.
bool is_plain_branch_reg(uint32_t w)
{
	return matches(w, 0xfffffc1f, 0xd61f0000) || matches(w, 0xfffffc1f, 0xd63f0000) ||
		matches(w, 0xfffffc1f, 0xd65f0000);
}
bool is_adr_adrp(uint32_t w) { return matches(w, 0x1f000000, 0x10000000); }

int64_t sign_extend(uint32_t v, int bits) { return int64_t(uint64_t(v) << (64 - bits)) >> (64 - bits); }

// The hints the kernel single-steps: nop, and the pointer-authentication and
// BTI hints a function may start with (paciasp, bti c). Any other hint
// (wfe, yield, autiasp, ...) is refused.
bool is_steppable_hint(uint32_t w)
{
	switch ((w >> 5) & 0x7f) {
	case 0x00: // nop
	case 0x07: // xpaclri
	case 0x08: // pacia1716
	case 0x0a: // pacib1716
	case 0x18: // paciaz
	case 0x19: // paciasp
	case 0x1a: // pacibz
	case 0x1b: // pacibsp
	case 0x20: // bti
	case 0x22: // bti c
	case 0x24: // bti j
	case 0x26: // bti jc
		return true;
	default: return false;
	}
}

// Out of line, an instruction that reads or writes the PC, traps, or changes
// processor state would act on the wrong address or state, so the kernel
// simulates the PC-relative branches and adr/adrp and refuses the others
// (uprobes.c: -EINVAL). Loads of a PC-relative literal are refused too
// since the late-2024 fix that removed their broken uprobe simulation
// (Linux 6.12 and the stable kernels that took it; kprobes still simulate
// them), as are exclusive and ordered loads and stores, whose sequence a
// single-step exception would break.
// Everything else is single-stepped, among it the usual first instructions
// of a function: `stp x29, x30, [sp, #-N]!`, `sub sp, sp, #N`, `paciasp`,
// `bti c`. So on arm64 most probes cost two traps, not one.
Trap arm64_trap(csh, const cs_insn &insn)
{
	uint32_t w = word(insn);
	if (is_b_or_bl(w) || is_b_cond(w) || is_cbz_cbnz(w) || is_tbz_tbnz(w) || is_plain_branch_reg(w) ||
	    is_adr_adrp(w))
		return Trap::Emulated;
	if (matches(w, 0x1c000000, 0x14000000)) {       // branches, exceptions, system instructions
		if (matches(w, 0xfe000000, 0xd6000000)) // other branches to a register: eret, retaa, braa ...
			return Trap::Rejected;
		if (matches(w, 0xff000000, 0xd4000000)) // svc, brk, hvc ...
			return Trap::Rejected;
		if (matches(w, 0xfffff01f, 0xd503201f)) // hints
			return is_steppable_hint(w) ? Trap::Stepped : Trap::Rejected;
		if (matches(w, 0xfff00000, 0xd5100000) || matches(w, 0xfff8f01f, 0xd500401f)) // msr
			return Trap::Rejected;
		if (matches(w, 0xffffffe0, 0xd53b4220)) // mrs xN, daif
			return Trap::Rejected;
		return Trap::Stepped; // other mrs, barriers, sys
	}
	if (matches(w, 0x3b000000, 0x18000000)) // ldr, ldrsw, prfm of a literal
		return Trap::Rejected;
	if (matches(w, 0x3f000000, 0x08000000)) // exclusive and ordered loads and stores
		return Trap::Rejected;
	return Trap::Stepped;
}

std::optional<uint64_t> arm64_direct_target(csh, const cs_insn &insn)
{
	uint32_t w = word(insn);
	int64_t off;
	if (is_b_or_bl(w))
		off = sign_extend(w & 0x03ffffff, 26) * 4;
	else if (is_b_cond(w) || is_cbz_cbnz(w))
		off = sign_extend((w >> 5) & 0x7ffff, 19) * 4;
	else if (is_tbz_tbnz(w))
		off = sign_extend((w >> 5) & 0x3fff, 14) * 4;
	else
		return std::nullopt;
	return insn.address + static_cast<uint64_t>(off);
}

// `bti c`: where a call through a register may land when branch target
// identification is on (-mbranch-protection=bti or standard); the kernel
// single-steps it. A function that saves the link register starts with
// `paciasp` instead, which is a landing pad too and signs the link register:
// a probe must stay in front of it, where a uretprobe replaces the link
// register before it is signed, so it is never skipped.
constexpr uint8_t kBtiC[] = {0x5f, 0x24, 0x03, 0xd5};

} // namespace

extern const IsaRules kArm64Rules = {
	.name = "arm64",
	.disasm_arch = CS_ARCH_ARM64,
	.disasm_mode = CS_MODE_ARM,
	.max_insn = 4,
	.landing_pad = kBtiC,
	.trap = arm64_trap,
	.direct_target = arm64_direct_target,
	// Not measured on arm64 yet (bench_span_cost needs an arm64 machine).
	.stepped_cost = "two traps, where one that starts with a PC-relative branch or adr/adrp costs one",
	.result_pointer_words = 0,        // x8: the declared arguments start at x0
	.return_address_on_stack = false, // x30, saved where the prologue chooses
	.elf_machine = 183,               // EM_AARCH64
};

#if defined(__aarch64__)

const char *dynamic_linker() { return "/lib/ld-linux-aarch64.so.1"; }

const char *cuda_target_dir() { return "sbsa-linux"; }

#endif

} // namespace eacgm::arch

#if defined(__aarch64__)
// Starts as the frame-pointer functions of real libraries built for arm64
// do: it stores the frame pointer and link register (single-stepped by the
// kernel, so the trap timed here is the two-trap one their calls pay).
__asm__(".pushsection .text\n"
	".globl eacgm_probes_cost_target\n"
	".type eacgm_probes_cost_target, %function\n"
	".p2align 4\n"
	"eacgm_probes_cost_target:\n"
	"  stp x29, x30, [sp, #-16]!\n"
	"  mov x29, sp\n"
	"  add x0, x0, #1\n"
	"  ldp x29, x30, [sp], #16\n"
	"  ret\n"
	".size eacgm_probes_cost_target, . - eacgm_probes_cost_target\n"
	".popsection\n");
#endif
