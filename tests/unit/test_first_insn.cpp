// SPDX-License-Identifier: Apache-2.0
// Which first instructions the kernel emulates for a uprobe on x86-64 (push
// of a register, relative call/jump/jcc) and on arm64 (PC-relative branches,
// adr/adrp), which it single-steps and which it refuses, decoded with
// capstone; and the note record and probes print for the stepped ones. Both
// instruction sets' rules are checked wherever the tests run (src/arch).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "probe/first_insn.h"

namespace eacgm {
namespace {

FirstInsn decode(std::vector<uint8_t> code)
{
	InsnDecoder dec(arch::Isa::X86_64);
	auto r = dec.decode(code.data(), code.size());
	EXPECT_TRUE(r) << (r ? "" : r.error().message);
	return r ? r.value() : FirstInsn{};
}

TEST(FirstInsn, EmulatedAndSingleStepped)
{
	EXPECT_TRUE(decode({0x55}).emulated); // push rbp
	EXPECT_EQ(decode({0x55}).text, "push rbp");
	EXPECT_TRUE(decode({0x41, 0x57}).emulated);        // push r15
	EXPECT_TRUE(decode({0xe8, 0, 0, 0, 0}).emulated);  // call rel32
	EXPECT_TRUE(decode({0xeb, 0x10}).emulated);        // jmp rel8
	EXPECT_TRUE(decode({0x75, 0x02}).emulated);        // jne rel8
	EXPECT_FALSE(decode({0x48, 0x89, 0xf8}).emulated); // mov rax, rdi
	EXPECT_EQ(decode({0x48, 0x89, 0xf8}).text, "mov rax, rdi");
	EXPECT_FALSE(decode({0x48, 0x83, 0xec, 0x10}).emulated); // sub rsp, 0x10
	EXPECT_FALSE(decode({0xff, 0x30}).emulated);             // push qword ptr [rax]: memory
	EXPECT_FALSE(decode({0xff, 0xe0}).emulated);             // jmp rax: not relative
	EXPECT_FALSE(decode({0xf3, 0x0f, 0x1e, 0xfa}).emulated); // endbr64
	InsnDecoder dec(arch::Isa::X86_64);
	uint8_t bad[] = {0x06}; // push es: invalid in 64-bit mode
	ASSERT_FALSE(dec.decode(bad, sizeof bad));
	EXPECT_EQ(dec.decode(bad, sizeof bad).error().kind, ErrorKind::BadInput);
}

// Reading the code: a file that is not there, an offset past its end.
TEST(FirstInsn, ReadFailuresHaveTheirKind)
{
	InsnDecoder dec;
	auto missing = dec.at("/nonexistent-eacgm/lib.so", 0);
	ASSERT_FALSE(missing);
	EXPECT_EQ(missing.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(missing.error().message, "cannot open /nonexistent-eacgm/lib.so");
	auto past = dec.at(SOURCE_DIR "/README.md", uint64_t(1) << 40);
	ASSERT_FALSE(past);
	EXPECT_EQ(past.error().kind, ErrorKind::BadInput);
}

// A probe goes past a leading endbr64 only where that provably sees the
// same calls: the next instruction is emulated and nothing in the function
// branches to it. Offsets are where code[0] lies in the file.
TEST(FirstInsn, ProbePastEndbr64WhereSafe)
{
	InsnDecoder dec(arch::Isa::X86_64);
	auto at = [&](std::vector<uint8_t> code, uint64_t offset = 0x1000) {
		return dec.probe_offset(code.data(), code.size(), offset);
	};
	const std::vector<uint8_t> endbr = {0xf3, 0x0f, 0x1e, 0xfa};
	auto with = [&](std::vector<uint8_t> rest) {
		std::vector<uint8_t> c = endbr;
		c.insert(c.end(), rest.begin(), rest.end());
		return c;
	};
	// endbr64; push rbp; mov rbp, rsp; lea rax, [rdi+1]; pop rbp; ret
	EXPECT_EQ(at(with({0x55, 0x48, 0x89, 0xe5, 0x48, 0x8d, 0x47, 0x01, 0x5d, 0xc3})), 0x1004u);
	// The same with a call to itself (recursion enters at the symbol: fine)
	// and a conditional jump forward.
	EXPECT_EQ(at(with({0x55, 0xe8, 0xf6, 0xff, 0xff, 0xff, 0x74, 0x00, 0x5d, 0xc3})), 0x1004u);
	// A loop back to the push (jmp rel8 -6 at 0x1008 lands on 0x1004).
	EXPECT_EQ(at(with({0x55, 0x5d, 0x90, 0x90, 0xeb, 0xfa})), 0x1000u);
	// endbr64; sub rsp, 8: the next instruction is single-stepped anyway.
	EXPECT_EQ(at(with({0x48, 0x83, 0xec, 0x08, 0xc3})), 0x1000u);
	// Bytes that do not decode: unproven.
	EXPECT_EQ(at(with({0x55, 0x06, 0xc3})), 0x1000u);
	// No endbr64, or nothing after it.
	EXPECT_EQ(at({0x55, 0xc3}), 0x1000u);
	EXPECT_EQ(at(endbr), 0x1000u);
}

// arm64 words, as the little-endian bytes the decoder reads.
FirstInsn decode_arm64(uint32_t word)
{
	InsnDecoder dec(arch::Isa::Arm64);
	uint8_t code[4] = {uint8_t(word), uint8_t(word >> 8), uint8_t(word >> 16), uint8_t(word >> 24)};
	auto r = dec.decode(code, sizeof code);
	EXPECT_TRUE(r) << std::hex << word << ": " << (r ? "" : r.error().message);
	return r ? r.value() : FirstInsn{};
}

enum class Arm64Trap { Emulated, Stepped, Rejected };
Arm64Trap trap_arm64(uint32_t word)
{
	FirstInsn i = decode_arm64(word);
	EXPECT_FALSE(i.emulated && i.rejected);
	return i.emulated ? Arm64Trap::Emulated : i.rejected ? Arm64Trap::Rejected : Arm64Trap::Stepped;
}

TEST(FirstInsn, Arm64SimulatedSteppedAndRefused)
{
	using enum Arm64Trap;
	// PC-relative branches and adr/adrp: simulated in the trap.
	EXPECT_EQ(trap_arm64(0x14000002), Emulated); // b .+8
	EXPECT_EQ(trap_arm64(0x94000000), Emulated); // bl .
	EXPECT_EQ(trap_arm64(0x54000041), Emulated); // b.ne .+8
	EXPECT_EQ(trap_arm64(0xb4000040), Emulated); // cbz x0, .+8
	EXPECT_EQ(trap_arm64(0x36000040), Emulated); // tbz w0, #0, .+8
	EXPECT_EQ(trap_arm64(0xd65f03c0), Emulated); // ret
	EXPECT_EQ(trap_arm64(0xd61f0200), Emulated); // br x16 (a PLT entry's last)
	EXPECT_EQ(trap_arm64(0xd63f0020), Emulated); // blr x1
	EXPECT_EQ(trap_arm64(0x90000000), Emulated); // adrp x0, .
	EXPECT_EQ(trap_arm64(0x10000000), Emulated); // adr x0, .
	// How functions start: single-stepped out of line.
	EXPECT_EQ(trap_arm64(0xa9bf7bfd), Stepped); // stp x29, x30, [sp, #-16]!
	EXPECT_EQ(decode_arm64(0xa9bf7bfd).text, "stp x29, x30, [sp, #-0x10]!");
	EXPECT_EQ(trap_arm64(0xd10083ff), Stepped); // sub sp, sp, #0x20
	EXPECT_EQ(trap_arm64(0x910003fd), Stepped); // mov x29, sp
	EXPECT_EQ(trap_arm64(0xd503233f), Stepped); // paciasp
	EXPECT_EQ(trap_arm64(0xd503245f), Stepped); // bti c
	EXPECT_EQ(trap_arm64(0xd503201f), Stepped); // nop
	EXPECT_EQ(trap_arm64(0xd53bd040), Stepped); // mrs x0, tpidr_el0
	EXPECT_EQ(trap_arm64(0xd5033bbf), Stepped); // dmb ish
	// Refused: attaching fails.
	EXPECT_EQ(trap_arm64(0x58000040), Rejected); // ldr x0, .+8 (a literal)
	EXPECT_EQ(trap_arm64(0x98000040), Rejected); // ldrsw x0, .+8
	EXPECT_EQ(trap_arm64(0xc85f7c01), Rejected); // ldxr x1, [x0]
	EXPECT_EQ(trap_arm64(0xc89ffc01), Rejected); // stlr x1, [x0]
	EXPECT_EQ(trap_arm64(0xd69f03e0), Rejected); // eret (like retaa, which capstone 4 cannot name)
	EXPECT_EQ(trap_arm64(0xd50323bf), Rejected); // autiasp: not a hint the kernel steps
	EXPECT_EQ(trap_arm64(0xd503205f), Rejected); // wfe
	EXPECT_EQ(trap_arm64(0xd4000001), Rejected); // svc #0
	EXPECT_EQ(trap_arm64(0xd4200000), Rejected); // brk #0
	EXPECT_EQ(trap_arm64(0xd53b4220), Rejected); // mrs x0, daif
	EXPECT_EQ(trap_arm64(0xd51bd040), Rejected); // msr tpidr_el0, x0
}

// arm64's landing pad is `bti c`; the same rule as endbr64's.
TEST(FirstInsn, Arm64ProbePastBtiWhereSafe)
{
	InsnDecoder dec(arch::Isa::Arm64);
	auto at = [&](std::vector<uint32_t> words, uint64_t offset = 0x1000) {
		std::vector<uint8_t> code;
		for (uint32_t w : words)
			for (int k = 0; k < 4; k++)
				code.push_back(uint8_t(w >> (8 * k)));
		return dec.probe_offset(code.data(), code.size(), offset);
	};
	const uint32_t bti_c = 0xd503245f, paciasp = 0xd503233f, ret = 0xd65f03c0;
	// bti c; b .+4; add x0, x0, #1; ret: the branch is simulated.
	EXPECT_EQ(at({bti_c, 0x14000001, 0x91000400, ret}), 0x1004u);
	// bti c; stp x29, x30, [sp, #-16]!: stepped anyway.
	EXPECT_EQ(at({bti_c, 0xa9bf7bfd, ret}), 0x1000u);
	// A loop back to the branch after the pad (b.gt at 0x100c to 0x1004).
	EXPECT_EQ(at({bti_c, 0x14000001, 0xf1000400, 0x54ffffcc, ret}), 0x1000u);
	// paciasp is no pad to skip: a uretprobe must see the link register
	// before it is signed.
	EXPECT_EQ(at({paciasp, 0x14000001, ret}), 0x1000u);
	// A pad alone.
	EXPECT_EQ(at({bti_c}), 0x1000u);
}

TEST(FirstInsn, NoteNamesTheSingleSteppedOnes)
{
	char path[] = "/tmp/eacgm-first-insn-XXXXXX";
	int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	// The note decodes as the processor the tests run on: an emulated first
	// instruction at 0, a stepped one at `leaf`.
	std::vector<uint8_t> code;
	uint64_t leaf = 0;
	std::string want;
	if constexpr (arch::kNative == arch::Isa::X86_64) {
		code = {0x55, 0x48, 0x89, 0xe5, 0xc3, /* at 5: */ 0x48, 0x89, 0xf8, 0xc3};
		leaf = 5;
		want = "1 probed function starts with an instruction the kernel single-steps rather than emulates, so "
		       "each of its calls costs about 20x the trap of one that starts with a push or a relative "
		       "branch: leaf (`mov rax, rdi`)";
	} else {
		// b .+4; ret; at 8: stp x29, x30, [sp, #-16]!; ret
		code = {0x01, 0x00, 0x00, 0x14, 0xc0, 0x03, 0x5f, 0xd6, 0xfd, 0x7b, 0xbf, 0xa9, 0xc0, 0x03, 0x5f, 0xd6};
		leaf = 8;
		want = "1 probed function starts with an instruction the kernel single-steps rather than emulates, so "
		       "each of its calls costs two traps, where one that starts with a PC-relative branch or "
		       "adr/adrp costs one: leaf (`stp x29, x30, [sp, #-0x10]!`)";
	}
	ASSERT_EQ(write(fd, code.data(), code.size()), ssize_t(code.size()));
	close(fd);
	EXPECT_EQ(single_step_note({{path, "framed", 0}}), "");
	EXPECT_EQ(single_step_note({{path, "framed", 0}, {path, "leaf", leaf}}), want);
	// A file that cannot be read says nothing rather than guessing.
	EXPECT_EQ(single_step_note({{"/nonexistent/eacgm", "gone", 0}}), "");
	unlink(path);
}

} // namespace
} // namespace eacgm
