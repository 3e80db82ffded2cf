// SPDX-License-Identifier: Apache-2.0
// The processor's facts that src/arch gives: its dynamic linker, and where
// glibc's pthread_self() lies from the thread pointer (what the BPF walker
// derives CPython 3.8-3.10's thread key from).
#include <gtest/gtest.h>

#include <pthread.h>
#include <thread>
#include <unistd.h>

#include "arch/arch.h"

namespace eacgm {
namespace {

TEST(Arch, DynamicLinkerIsThisProcessors)
{
	// The tests are a program of this processor: its linker is here.
	EXPECT_EQ(access(arch::dynamic_linker(), X_OK), 0) << arch::dynamic_linker();
	EXPECT_STREQ(arch::native_rules().name, arch::kNative == arch::Isa::X86_64 ? "x86-64" : "arm64");
}

TEST(Arch, PthreadSelfIsAFixedDistanceBelowTheThreadPointer)
{
	uint16_t here = arch::pthread_below_thread_pointer();
	if constexpr (arch::kNative == arch::Isa::X86_64)
		EXPECT_EQ(here, 0u); // the thread pointer is pthread_self()
	else
		EXPECT_GT(here, 0u); // sizeof(struct pthread), just below it
	// The same in another thread: a property of glibc, not of the thread.
	uint16_t there = 0xffff;
	std::thread([&] { there = arch::pthread_below_thread_pointer(); }).join();
	EXPECT_EQ(there, here);
}

// A function returning a class by value gets a hidden pointer to the
// caller's storage: x86-64's first argument word (rdi), so its declared
// arguments start one word later; arm64's x8, which moves none.
TEST(Arch, WhereTheHiddenResultPointerGoes)
{
	EXPECT_EQ(arch::rules(arch::Isa::X86_64).result_pointer_words, 1u);
	EXPECT_EQ(arch::rules(arch::Isa::Arm64).result_pointer_words, 0u);
}

} // namespace
} // namespace eacgm
