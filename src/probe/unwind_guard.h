// SPDX-License-Identifier: Apache-2.0
// The exception guard's side in user space (its programs are in
// bpf/span.bpf.c, which says what they do): where it probes, whether this
// machine lets it load, and which libraries must not get return probes
// without it.
//
// A return probe replaces a function's return address with the kernel's
// trampoline, which has no unwind information: without the guard, a C++
// exception thrown through a probed call ends the program in
// std::terminate, and pthread_exit and backtrace() stop early there.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "eacgm/abi/events.h"
#include "probe/elf_symbols.h"
#include "probe/first_insn.h"

namespace eacgm {

// A function the guard probes (entry only), and what its call says.
struct GuardFunction {
	const char *symbol;
	eacgm_unwind_role role;
};

// Every function of the guard, whichever library defines it: libgcc_s's
// (or LLVM libunwind's) unwinder, the C++ runtime's catch, glibc's longjmp.
const std::vector<GuardFunction> &guard_functions();

// A place to probe in one file: the function's file offset and its role
// (the attach cookie).
struct GuardSite {
	uint64_t file_offset;
	uint64_t size; // the function's, for where past its landing pad the probe may go
	eacgm_unwind_role role;
	std::string symbol;
};

// The guard functions `elf` defines, one site per address (longjmp and
// siglongjmp are one function in glibc). Empty for most libraries; a library
// built with its own copy of the unwinder (-static-libgcc) has some. Empty
// for a file of another processor (a 32-bit libc in the loader cache). With
// a decoder, each site is past the function's landing pad where that sees
// the same calls (InsnDecoder::probe_offset): Debian's libgcc_s starts each
// with a landing pad, which the kernel single-steps (16 us a trap here, and
// a throw makes a dozen of them), then a push, which it emulates.
std::vector<GuardSite> guard_sites(const ElfFile &elf, InsnDecoder *decoder = nullptr);

// Whether a library file is one a process's unwinder, C++ runtime or
// longjmp comes from, by its name: libgcc_s, libunwind, libstdc++,
// libc++abi, glibc's libc. These are probed in every process that maps
// them, before any return probe of that process could be live.
bool holds_unwinder(const std::string &path);

// Why the guard cannot work here, or nothing where it can: only a processor
// whose calls push their return address has a slot to write back
// (arch::IsaRules::return_address_on_stack).
std::optional<std::string> guard_refusal();

} // namespace eacgm
