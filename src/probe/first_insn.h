// How the kernel takes a uprobe at a function's first instruction, which
// decides what every traced call costs. On x86-64 (arch/x86/kernel/uprobes.c)
// a `push` of a register and a relative call, jump or conditional jump are
// emulated: the trap costs about 0.7 us here. Any other instruction is copied
// out of line and single-stepped: about 15 us here, 20x more (bench_span_cost,
// "single-stepped"). Functions built with frame pointers start with
// `push %rbp` (libcudart's, libnccl's and libtorch's entry points do); an
// optimised leaf function often does not. `endbr64` is single-stepped too:
// probe_offset() places a probe past it where that changes nothing else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/result.h"

namespace eacgm {

struct FirstInsn {
	bool emulated = false;
	std::string text; // as disassembled, e.g. "push rbp", "mov rax, rdi"
};

// Holds one disassembler (capstone) for many decodes; not thread-safe.
class InsnDecoder {
public:
	InsnDecoder();
	~InsnDecoder();
	InsnDecoder(const InsnDecoder &) = delete;
	InsnDecoder &operator=(const InsnDecoder &) = delete;

	// The instruction at code[0..n) (x86-64).
	Result<FirstInsn> decode(const uint8_t *code, size_t n) const;
	// The instruction at a file offset (where a uprobe attaches). The file
	// stays open for the next call on the same path: a library's probes
	// are decoded one after another.
	Result<FirstInsn> at(const std::string &path, uint64_t offset);
	// Where to probe the function of `size` bytes at `offset`: past its
	// leading `endbr64` when that is provably the same, else `offset`.
	// endbr64 marks where an indirect branch may land and does nothing
	// else, so a probe right after it sees every call with the same
	// registers and stack; but the kernel single-steps it (a trap 29x dearer
	// here: 23 us against 0.8 us), and code built with -fcf-protection
	// (Ubuntu's packages, libcuda, libnccl) starts every function with it.
	// Moved only when the next instruction is emulated and no branch of the
	// function itself targets it (a loop back to the top would count as a
	// second call); direct jumps from other functions land on the symbol,
	// where compilers and linkers place them.
	uint64_t probe_offset(const std::string &path, uint64_t offset, uint64_t size);
	// The same on the function's bytes, `offset` being where code[0] lies.
	uint64_t probe_offset(const uint8_t *code, size_t size, uint64_t offset) const;

private:
	size_t handle_ = 0; // capstone's csh
	bool ok_ = false;
	std::string path_; // the file fd_ has open
	UniqueFd fd_;
};

// "NAME starts with `INSN`, which the kernel single-steps ..." for the
// probes among (path, offset, name) that are not emulated, one line naming
// up to five of them; empty when all are emulated or none decodes.
struct ProbeSite {
	std::string path, name;
	uint64_t offset = 0;
};
std::string single_step_note(const std::vector<ProbeSite> &sites);

} // namespace eacgm
