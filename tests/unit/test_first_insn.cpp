// Which first instructions the kernel emulates for a uprobe on x86-64 (push
// of a register, relative call/jump/jcc) and which it single-steps, decoded
// with capstone; and the note record and probes print for the latter.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "probe/first_insn.h"

namespace eacgm {
namespace {

FirstInsn decode(std::vector<uint8_t> code)
{
	InsnDecoder dec;
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
	InsnDecoder dec;
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
	InsnDecoder dec;
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

TEST(FirstInsn, NoteNamesTheSingleSteppedOnes)
{
	char path[] = "/tmp/eacgm-first-insn-XXXXXX";
	int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	const uint8_t code[] = {0x55, 0x48, 0x89, 0xe5, 0xc3, /* at 5: */ 0x48, 0x89, 0xf8, 0xc3};
	ASSERT_EQ(write(fd, code, sizeof code), ssize_t(sizeof code));
	close(fd);
	EXPECT_EQ(single_step_note({{path, "framed", 0}}), "");
	EXPECT_EQ(single_step_note({{path, "framed", 0}, {path, "leaf", 5}}),
		  "1 probed function starts with an instruction the kernel single-steps rather than emulates, so each "
		  "of its calls costs about 20x the trap of one that starts with a push or a relative branch: leaf "
		  "(`mov rax, rdi`)");
	// A file that cannot be read says nothing rather than guessing.
	EXPECT_EQ(single_step_note({{"/nonexistent/eacgm", "gone", 0}}), "");
	unlink(path);
}

} // namespace
} // namespace eacgm
