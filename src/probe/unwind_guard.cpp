// SPDX-License-Identifier: Apache-2.0
#include "probe/unwind_guard.h"

#include <set>

#include "arch/arch.h"

namespace eacgm {

const std::vector<GuardFunction> &guard_functions()
{
	static const std::vector<GuardFunction> functions = {
		// The unwinder (libgcc_s, LLVM's libunwind): each walks the stack
		// from the caller's frame up, reading return addresses.
		{"_Unwind_RaiseException", EACGM_UNWIND_RAISE},
		{"_Unwind_Resume_or_Rethrow", EACGM_UNWIND_RETHROW},
		{"_Unwind_ForcedUnwind", EACGM_UNWIND_FORCED},
		{"_Unwind_Resume", EACGM_UNWIND_RESUME},
		{"_Unwind_Backtrace", EACGM_UNWIND_BACKTRACE},
		// Called for each frame a walk steps through, before it reads
		// the frame's return address: where a walk waits for its restore.
		{"_Unwind_Find_FDE", EACGM_UNWIND_FIND_FDE},
		// The C++ runtime (libstdc++, libc++abi): a handler begins.
		{"__cxa_begin_catch", EACGM_UNWIND_CATCH},
		// glibc: frames left without unwinding (one function under four
		// names in glibc 2.36; __longjmp_chk is _FORTIFY_SOURCE's).
		{"longjmp", EACGM_UNWIND_LONGJMP},
		{"_longjmp", EACGM_UNWIND_LONGJMP},
		{"siglongjmp", EACGM_UNWIND_LONGJMP},
		{"__longjmp_chk", EACGM_UNWIND_LONGJMP},
	};
	return functions;
}

std::vector<GuardSite> guard_sites(const ElfFile &elf, InsnDecoder *decoder)
{
	std::vector<GuardSite> sites;
	if (elf.machine() != arch::native_rules().elf_machine)
		return sites;
	std::set<uint64_t> done;
	for (const GuardFunction &f : guard_functions()) {
		const ElfSymbol *s = elf.find(f.symbol);
		if (!s || !s->func || !done.insert(s->addr).second)
			continue;
		auto off = elf.vaddr_to_offset(s->addr);
		if (!off)
			continue;
		const uint64_t at = decoder ? decoder->probe_offset(elf.path(), off.value(), s->size) : off.value();
		sites.push_back({at, s->size, f.role, f.symbol});
	}
	return sites;
}

bool holds_unwinder(const std::string &path)
{
	const std::string base = path.substr(path.rfind('/') + 1);
	// glibc's libc only: musl's jmp_buf keeps the stack pointer unmangled,
	// which the guard's longjmp probe would misread.
	if (base == "libc.so.6")
		return true;
	for (const char *prefix : {"libgcc_s.so", "libunwind.so", "libstdc++.so", "libc++abi.so"})
		if (base.rfind(prefix, 0) == 0)
			return true;
	return false;
}

std::optional<std::string> guard_refusal()
{
	if (!arch::native_rules().return_address_on_stack)
		return std::string("on ") + arch::native_rules().name +
			" a call keeps its return address in a register, which the guard cannot find again";
	return std::nullopt;
}

} // namespace eacgm
