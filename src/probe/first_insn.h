// SPDX-License-Identifier: Apache-2.0
// How the kernel takes a uprobe at a function's first instruction, which
// decides what every traced call costs: an instruction it emulates costs one
// trap; one it copies out of line and single-steps costs a second, about 20x
// the first on x86-64 (bench_span_cost, "single-stepped"). Which are which
// is the instruction set's (src/arch: IsaRules::trap). The landing pad that
// code built for control-flow protection starts functions with is
// single-stepped too: probe_offset() places a probe past it where that
// changes nothing else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "arch/arch.h"
#include "common/fd.h"
#include "common/result.h"

namespace eacgm {

struct FirstInsn {
	bool emulated = false;
	bool rejected = false; // the kernel refuses a probe here (arm64: ldr literal, exclusive loads ...)
	std::string text;      // as capstone disassembles it: mnemonic and operands
};

// Holds one disassembler (capstone) for many decodes; not thread-safe.
// Decodes the code of `isa`: the processor eacgm runs on unless a test
// asks for another.
class InsnDecoder {
public:
	explicit InsnDecoder(arch::Isa isa = arch::kNative);
	~InsnDecoder();
	InsnDecoder(const InsnDecoder &) = delete;
	InsnDecoder &operator=(const InsnDecoder &) = delete;

	// The instruction at code[0..n).
	Result<FirstInsn> decode(const uint8_t *code, size_t n) const;
	// The instruction at a file offset (where a uprobe attaches). The file
	// stays open for the next call on the same path: a library's probes
	// are decoded one after another.
	Result<FirstInsn> at(const std::string &path, uint64_t offset);
	// Where to probe the function of `size` bytes at `offset`: past its
	// leading landing pad (IsaRules::landing_pad) when that is provably the
	// same, else `offset`. The pad does nothing but mark where an indirect
	// branch may land, so a probe right after it sees every call with the
	// same registers and stack; but the kernel single-steps it. Moved only
	// when the next instruction is emulated and no branch of the function
	// itself targets it (a loop back to the top would count as a second
	// call); direct jumps from other functions land on the symbol, where
	// compilers and linkers place them.
	uint64_t probe_offset(const std::string &path, uint64_t offset, uint64_t size);
	// The same on the function's bytes, `offset` being where code[0] lies.
	uint64_t probe_offset(const uint8_t *code, size_t size, uint64_t offset) const;

private:
	const arch::IsaRules &rules_;
	size_t handle_ = 0; // capstone's csh
	bool ok_ = false;
	std::string path_; // the file fd_ has open
	UniqueFd fd_;
};

// "NAME starts with `INSN`, which the kernel single-steps ..." for the
// probes among (path, offset, name) that are not emulated, one line naming
// up to five of them; empty when all are emulated or none decodes. Decoded
// as the code of the processor eacgm runs on.
struct ProbeSite {
	std::string path, name;
	uint64_t offset = 0;
};
std::string single_step_note(const std::vector<ProbeSite> &sites);

} // namespace eacgm
