// SPDX-License-Identifier: Apache-2.0
// The rules of each instruction set, by name (arch.h).
#include "arch/arch.h"

#include <pthread.h>

namespace eacgm::arch {

extern const IsaRules kX86_64Rules; // x86_64.cpp
extern const IsaRules kArm64Rules;  // arm64.cpp

const IsaRules &rules(Isa isa) { return isa == Isa::Arm64 ? kArm64Rules : kX86_64Rules; }

uint16_t pthread_below_thread_pointer()
{
	auto tp = reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
	return static_cast<uint16_t>(tp - static_cast<uintptr_t>(pthread_self()));
}

} // namespace eacgm::arch
