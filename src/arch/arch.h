// SPDX-License-Identifier: Apache-2.0
// What eacgm's user-space code needs to know about the processor: the one
// place that names an instruction set (a ctest, arch.names, keeps every
// other file of src/, bpf/ and include/ free of such names). The BPF side
// has its counterpart in bpf/arch/, the build in cmake/arch.cmake.
//
// Each instruction set's rules live in their own file (x86_64.cpp,
// arm64.cpp), and both are built on every host: the rules are pure
// functions of bytes, so the unit tests check both wherever they run. What
// only the target can have (its dynamic linker, the function the trap is
// timed on, written in its assembly) is chosen by the compiler's target.
#pragma once
#include <capstone/capstone.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace eacgm::arch {

enum class Isa { X86_64, Arm64 };

#if defined(__x86_64__)
inline constexpr Isa kNative = Isa::X86_64;
#elif defined(__aarch64__)
inline constexpr Isa kNative = Isa::Arm64;
#else
#error "eacgm runs on x86-64 and arm64 (src/arch)"
#endif

// How the kernel takes a uprobe placed on an instruction.
enum class Trap {
	Emulated, // done by the kernel in the trap itself: one trap a call
	Stepped,  // copied out of line and single-stepped: a second trap a call
	Rejected, // the kernel refuses the probe (attaching fails with EINVAL)
};

// An instruction set's part in first_insn (src/probe/first_insn.h).
struct IsaRules {
	const char *name;    // as messages name it: "x86-64", "arm64"
	cs_arch disasm_arch; // capstone's disassembler for it
	cs_mode disasm_mode;
	size_t max_insn; // bytes read to decode one instruction
	// The landing pad a compiler puts first in functions that indirect
	// branches may reach, which the kernel single-steps and which does
	// nothing else (x86-64's endbr64, arm64's `bti c`): probe_offset()
	// places a probe past it when that sees the same calls.
	std::span<const uint8_t> landing_pad;
	// How the kernel traps on the decoded instruction (capstone's detail on).
	Trap (*trap)(csh handle, const cs_insn &insn);
	// Where a direct branch or call goes; nullopt for anything else.
	std::optional<uint64_t> (*direct_target)(csh handle, const cs_insn &insn);
	// What a single-stepped probe costs against an emulated one, for the
	// note on them: "so each of its calls costs <this>".
	const char *stepped_cost;
	// Argument words that come before the declared arguments of a function
	// returning a class by value, through a hidden pointer to the caller's
	// storage (a torch operator's at::Tensor, a process group's Work):
	// x86-64 passes that pointer as the first word (1); arm64 in a register
	// of its own, x8 (0). bpf/arch reads the pointer as EACGM_SLOT_RESULT.
	unsigned result_pointer_words;
	// Whether a frame's return address is on the stack at the function's
	// entry, where a uretprobe's trampoline replaces it: x86-64's `call`
	// pushes it there, so the exception guard (bpf/span.bpf.c) can hand the
	// real one back before an unwinder walks the stack. arm64's `bl` leaves
	// it in x30, saved wherever the prologue chooses: no guard there.
	bool return_address_on_stack;
	// The ELF header's e_machine of code for it.
	uint16_t elf_machine;
};

const IsaRules &rules(Isa isa);
inline const IsaRules &native_rules() { return rules(kNative); }

// glibc's dynamic linker for programs of this processor, as their ELF
// interpreter names it: run in list mode to find a program's libraries,
// and watched for the libraries a process loads later.
const char *dynamic_linker();

// The directory of the CUDA toolkit's libraries for this processor,
// under /usr/local/cuda/targets/ (NVIDIA names arm64 servers "sbsa").
const char *cuda_target_dir();

// How many bytes below a thread's thread pointer glibc's pthread_self()
// lies: what CPython 3.8-3.10 name a thread by (tstate->thread_id), and
// what the BPF walker finds from the thread pointer the kernel keeps
// (bpf/arch). 0 on x86-64, whose TLS layout puts glibc's struct pthread at
// the thread pointer (the fs base); on arm64 the thread pointer (tpidr_el0)
// points just past it, so this is sizeof(struct pthread). Measured on the
// calling thread, so the traced program is taken to run on a glibc of the
// same layout as eacgm's (one built from another glibc release, as in a
// container, may not).
uint16_t pthread_below_thread_pointer();

} // namespace eacgm::arch

// A function of eacgm itself that starts as the entry points of libcudart,
// libnccl and libtorch built for this processor do (with their frame set-up),
// so that the trap timed on it (probe/budget.cpp, `eacgm probes`) is the one
// those libraries' calls pay. Written in the target's assembly in its
// architecture's file.
extern "C" long eacgm_probes_cost_target(long x);
