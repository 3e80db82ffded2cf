// SPDX-License-Identifier: Apache-2.0
// The exception guard's user side without BPF: where it probes (the
// functions of the unwinder, the C++ runtime and libc this process maps),
// which files take part in C++ exceptions, how a span left by an exception
// reads, and how the agent answers requests (a stand-in for the machine).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <typeinfo>
#include <unistd.h>

#include "arch/arch.h"
#include "pipeline/decode.h"
#include "probe/elf_symbols.h"
#include "probe/guard_server.h"
#include "probe/proc_maps.h"
#include "probe/symbolizer.h"
#include "probe/unwind_guard.h"

namespace eacgm {
namespace {

// A library of this processor that this process maps, by the start of its
// file name (under qemu-user, the emulator's own libraries are mapped too).
std::string mapped(const std::string &prefix)
{
	auto maps = read_maps(getpid());
	if (maps)
		for (auto &f : mapped_files(maps.value()))
			if (f.substr(f.rfind('/') + 1).rfind(prefix, 0) == 0)
				if (auto elf = ElfFile::open(f);
				    elf && elf->machine() == arch::native_rules().elf_machine)
					return f;
	return "";
}

std::map<eacgm_unwind_role, std::set<std::string>> roles(const std::string &path)
{
	auto elf = ElfFile::open(path);
	EXPECT_TRUE(elf.ok()) << path;
	std::map<eacgm_unwind_role, std::set<std::string>> out;
	if (elf)
		for (const GuardSite &s : guard_sites(elf.value()))
			out[s.role].insert(s.symbol);
	return out;
}

TEST(UnwindGuard, ProbesTheUnwinderTheRuntimeAndLongjmpThisProcessMaps)
{
	const std::string gcc = mapped("libgcc_s.so"), cxx = mapped("libstdc++.so"), libc = mapped("libc.so.6");
	ASSERT_FALSE(gcc.empty());
	ASSERT_FALSE(cxx.empty());
	ASSERT_FALSE(libc.empty());
	for (auto &f : {gcc, cxx, libc})
		EXPECT_TRUE(holds_unwinder(f)) << f;
	using R = std::map<eacgm_unwind_role, std::set<std::string>>;
	EXPECT_EQ(roles(gcc),
		  (R{{EACGM_UNWIND_RAISE, {"_Unwind_RaiseException"}},
		     {EACGM_UNWIND_RETHROW, {"_Unwind_Resume_or_Rethrow"}},
		     {EACGM_UNWIND_FORCED, {"_Unwind_ForcedUnwind"}},
		     {EACGM_UNWIND_RESUME, {"_Unwind_Resume"}},
		     {EACGM_UNWIND_BACKTRACE, {"_Unwind_Backtrace"}},
		     {EACGM_UNWIND_FIND_FDE, {"_Unwind_Find_FDE"}}}));
	EXPECT_EQ(roles(cxx), (R{{EACGM_UNWIND_CATCH, {"__cxa_begin_catch"}}}));
	// glibc's longjmp, _longjmp and siglongjmp are one function: one probe;
	// __longjmp_chk another.
	auto jumps = roles(libc);
	ASSERT_EQ(jumps.size(), 1u);
	EXPECT_EQ(jumps[EACGM_UNWIND_LONGJMP].size(), 2u);
	EXPECT_TRUE(jumps[EACGM_UNWIND_LONGJMP].count("__longjmp_chk"));
	EXPECT_TRUE(roles(std::string(TESTPROGS_DIR) + "/libeacgm_testlib.so").empty());
}

TEST(UnwindGuard, UnwinderFilesAreKnownByName)
{
	for (const char *f : {"/lib/x86_64-linux-gnu/libgcc_s.so.1", "/opt/conda/lib/libstdc++.so.6.0.32",
			      "/usr/lib/libunwind.so.8", "/usr/lib/libc++abi.so.1", "/lib/aarch64-linux-gnu/libc.so.6"})
		EXPECT_TRUE(holds_unwinder(f)) << f;
	// musl's libc keeps the jmp_buf's stack pointer unmangled: not probed.
	for (const char *f : {"/lib/ld-musl-x86_64.so.1", "/usr/lib/libc.so", "/usr/lib/libtorch_cpu.so",
			      "/usr/lib/libcuda.so.1", "libgcc_s"})
		EXPECT_FALSE(holds_unwinder(f)) << f;
}

TEST(UnwindGuard, FilesOfCxxExceptionsAreTold)
{
	for (auto [path, cxx] : {std::pair{std::string(TESTPROGS_DIR) + "/libeacgm_throwlib.so", true},
				 {std::string(TESTPROGS_DIR) + "/libeacgm_testlib.so", false},
				 {mapped("libstdc++.so"), true}}) {
		auto elf = ElfFile::open(path);
		ASSERT_TRUE(elf.ok()) << path;
		EXPECT_EQ(elf->cxx_exceptions(), cxx) << path;
	}
}

TEST(UnwindGuard, AnExceptionsTypeIsTheDataObjectAtItsTypeInfo)
{
	auto elf = ElfFile::open(mapped("libstdc++.so"));
	ASSERT_TRUE(elf.ok());
	const ElfSymbol *ti = elf->find("_ZTISt13runtime_error");
	ASSERT_NE(ti, nullptr);
	const ElfSymbol *at = elf->object_at(ti->addr);
	ASSERT_NE(at, nullptr);
	EXPECT_EQ(at->demangled(), "typeinfo for std::runtime_error");
	EXPECT_EQ(elf->object_at(ti->addr + 1), nullptr); // only where the object starts
}

TEST(UnwindGuard, HowASpanLeftSays)
{
	EXPECT_EQ(left_text(EACGM_SPAN_LEFT_EXCEPTION, std::string("typeinfo for c10::Error")), "threw c10::Error");
	EXPECT_EQ(left_text(EACGM_SPAN_LEFT_EXCEPTION, std::string("typeinfo for std::out_of_range")),
		  "threw std::out_of_range");
	// No symbol there, or inside another object: no type named.
	EXPECT_EQ(left_text(EACGM_SPAN_LEFT_EXCEPTION, std::nullopt), "threw an exception");
	EXPECT_EQ(left_text(EACGM_SPAN_LEFT_EXCEPTION, std::string("typeinfo for Foo+0x8")), "threw an exception");
	EXPECT_EQ(left_text(EACGM_SPAN_LEFT_EXCEPTION, std::string("vtable for Foo")), "threw an exception");
	EXPECT_EQ(left_text(EACGM_SPAN_LEFT_FORCED, std::nullopt), "unwound by pthread_exit or pthread_cancel");
	EXPECT_EQ(left_text(EACGM_SPAN_LEFT_LONGJMP, std::nullopt), "left by longjmp");
}

TEST(UnwindGuard, AnExceptionsTypeIsNamedFromItsManglingWhileItsProcessLives)
{
	EXPECT_EQ(demangle_type("N3c105ErrorE"), "c10::Error");
	EXPECT_EQ(demangle_type("St13runtime_error"), "std::runtime_error");
	EXPECT_EQ(demangle_type("*N12_GLOBAL__N_13FooE"), "(anonymous namespace)::Foo"); // local to its file
	EXPECT_EQ(demangle_type(""), std::nullopt);
	EXPECT_EQ(demangle_type("N3c10"), std::nullopt);
	// The program's record (EACGM_SPEC_EXCEPTION_TYPE): what the spans the
	// exception leaves are named by, though the process is gone (no maps).
	Symbolizer sym("/nonexistent");
	eacgm_span_event e{};
	e.spec_id = EACGM_SPEC_EXCEPTION_TYPE;
	e.tgid = 4242;
	e.ret = 0x7f001000;
	std::memcpy(e.args, "N3c1010IndexErrorE", 18);
	name_exception_type(e, sym);
	EXPECT_EQ(sym.resolve_object(4242, 0x7f001000), "typeinfo for c10::IndexError");
	EXPECT_EQ(sym.resolve_object(4243, 0x7f001000), std::nullopt);
	// A name that may have been cut (the record holds 62 bytes of it) is left to the process's symbols.
	std::memset(e.args, 'A', sizeof(e.args) - 2);
	e.ret = 0x7f002000;
	name_exception_type(e, sym);
	EXPECT_EQ(sym.resolve_object(4242, 0x7f002000), std::nullopt);
}

TEST(UnwindGuard, DecodeMakesALeftSpansReturnItsText)
{
	ProbeSpec spec;
	spec.layer = "user";
	spec.function = "f";
	spec.returns = "i64";
	SpecSet specs;
	Interner names;
	eacgm_span_event e{};
	e.flags = EACGM_SPAN_LEFT_EXCEPTION;
	e.ret = 0x7f0012345678; // a type_info's address, no return value
	TypedSpan t = decode_typed(e, spec, specs, nullptr, names);
	EXPECT_EQ(t.ret, 0);
	EXPECT_EQ(names.text(StrId(t.left)), "threw an exception");
	Span s = render_span(t, spec, specs, names);
	EXPECT_EQ(s.ret, 0);
	EXPECT_EQ(s.ret_name, "threw an exception");
	e.flags = 0;
	e.ret = 7;
	t = decode_typed(e, spec, specs, nullptr, names);
	EXPECT_EQ(t.left, 0u);
	EXPECT_EQ(t.ret, 7);
	EXPECT_EQ(render_span(t, spec, specs, names).ret_name, "");
}

// ---- Answering, against a stand-in machine.

class FakeMachine : public GuardSystem {
public:
	char state(uint32_t, uint32_t tid) override
	{
		polls++;
		if (!threads.count(tid))
			return 0;
		return polls > stops_after ? threads[tid].state : 'R';
	}
	std::optional<uint64_t> stack_pointer(uint32_t, uint32_t tid) override { return threads[tid].sp; }
	std::optional<uint64_t> instruction_pointer(uint32_t, uint32_t tid) override { return threads[tid].ip; }
	std::optional<eacgm_guard_thread> guard_state(uint32_t tid) override
	{
		if (!threads.count(tid))
			return std::nullopt;
		return threads[tid].g;
	}
	bool read(uint32_t, uint64_t addr, uint64_t &v) override
	{
		if (!memory.count(addr))
			return false;
		v = memory[addr];
		return true;
	}
	bool write(uint32_t, uint64_t addr, uint64_t v) override
	{
		if (read_only.count(addr))
			return false;
		memory[addr] = v;
		return true;
	}
	void mark_done(uint32_t tid, uint64_t seq) override { done[tid] = seq; }
	void resume(uint32_t tgid) override { resumed.push_back(tgid); }
	uint64_t now_ns() override { return clock += 1000; }
	void pause_us(unsigned us) override { clock += us * 1000 + 1000; }

	struct Thread {
		char state = 'T';
		uint64_t sp = 0, ip = 0;
		eacgm_guard_thread g{};
	};
	std::map<uint32_t, Thread> threads;
	std::map<uint64_t, uint64_t> memory;
	std::set<uint64_t> read_only;
	std::map<uint32_t, uint64_t> done;
	std::vector<uint32_t> resumed;
	uint64_t clock = 0, polls = 0, stops_after = 0;
};

constexpr uint64_t kTramp = 0x7ffff000, kRet1 = 0x401234, kRet2 = 0x405678;

eacgm_guard_request request(eacgm_guard_kind kind, uint64_t seq, std::vector<std::array<uint64_t, 3>> slots)
{
	eacgm_guard_request r{};
	r.tgid = 100, r.tid = 101, r.seq = seq, r.kind = kind;
	r.sp = 0x7000, r.ip = 0x9000, r.ts_ns = 0;
	for (auto [slot, expect, value] : slots) {
		r.slot[r.n] = slot, r.expect[r.n] = expect, r.value[r.n] = value;
		r.n++;
	}
	return r;
}

TEST(GuardAnswerer, ARestoreWritesTheSlotsThatHoldWhatTheProgramSawThenResumes)
{
	FakeMachine m;
	m.threads[101].g.seq = 1;
	m.threads[101].g.restore_seq = 1;
	m.memory = {{0x7100, kTramp}, {0x7200, kTramp}, {0x7300, 0x1111}};
	GuardAnswerer a(m);
	a.answer(request(
		EACGM_GUARD_RESTORE, 1,
		{{0x7100, kTramp, kRet1}, {0x7200, kTramp, kRet2}, {0x7300, kTramp, 0x2222}, {0x7400, kTramp, 1}}));
	// The slot that held something else, and the one that did not read, are left as they are.
	EXPECT_EQ(m.memory, (std::map<uint64_t, uint64_t>{{0x7100, kRet1}, {0x7200, kRet2}, {0x7300, 0x1111}}));
	EXPECT_EQ(m.done[101], 1u);
	EXPECT_TRUE(m.resumed.empty()); // not before the batch is done
	m.memory[0x7500] = kTramp;
	m.threads[101].g.seq = 2;
	a.answer(request(EACGM_GUARD_RESTORE, 2, {{0x7500, kTramp, kRet1}}));
	a.resume_all();
	EXPECT_EQ(m.resumed, std::vector<uint32_t>{100}); // once, for both
	EXPECT_EQ(a.counts().requests, 2u);
	EXPECT_EQ(a.counts().restored, 3u);
	EXPECT_EQ(a.counts().failed + a.counts().moot, 0u);
	EXPECT_GT(a.counts().held_ns, 0u);
	EXPECT_GE(a.counts().held_ns, a.counts().max_held_ns);
}

TEST(GuardAnswerer, AWriteThatFailsIsCounted)
{
	FakeMachine m;
	m.memory = {{0x7100, kTramp}};
	m.read_only = {0x7100};
	GuardAnswerer a(m);
	m.threads[101].g.seq = 1;
	a.answer(request(EACGM_GUARD_RESTORE, 1, {{0x7100, kTramp, kRet1}}));
	EXPECT_EQ(a.counts().failed, 1u);
	EXPECT_EQ(m.memory[0x7100], kTramp);
	EXPECT_EQ(m.done[101], 1u); // done all the same: the walk goes on, as it would untraced
}

TEST(GuardAnswerer, ItWaitsForTheStopAndGivesUpOnARequestThatNoLongerStands)
{
	FakeMachine m;
	m.memory = {{0x7100, kTramp}};
	m.threads[101].g.seq = 1;
	m.stops_after = 5; // running for the first polls
	GuardAnswerer a(m);
	a.answer(request(EACGM_GUARD_RESTORE, 1, {{0x7100, kTramp, kRet1}}));
	EXPECT_EQ(m.memory[0x7100], kRet1);
	EXPECT_GT(m.polls, 5u);
	// Abandoned: the unwinding found its handler below the slots.
	m.memory[0x7100] = kTramp;
	m.threads[101].g.seq = 2;
	m.threads[101].g.abandoned_seq = 2;
	a.answer(request(EACGM_GUARD_RESTORE, 2, {{0x7100, kTramp, kRet1}}));
	EXPECT_EQ(m.memory[0x7100], kTramp);
	EXPECT_EQ(m.done[101], 1u);
	// Gone: its thread exited.
	m.threads.clear();
	a.answer(request(EACGM_GUARD_RESTORE, 3, {{0x7100, kTramp, kRet1}}));
	// Never stopped (its stop was ended early): given up after its wait.
	m.threads[101].state = 'S';
	m.threads[101].g.seq = 4;
	const uint64_t before = m.clock;
	a.answer(request(EACGM_GUARD_RESTORE, 4, {{0x7100, kTramp, kRet1}}));
	EXPECT_GE(m.clock - before, GuardAnswerer::kRestoreWaitNs);
	EXPECT_EQ(m.memory[0x7100], kTramp);
	EXPECT_EQ(a.counts().moot, 3u);
	a.resume_all();
	EXPECT_EQ(m.resumed, std::vector<uint32_t>{100}); // resumed whatever came of it
}

// Two agents on one machine (serve, and someone's record): each one's
// guard asks for the same slots; the second finds them written and has no
// stop to wait for (the first one's SIGCONT may have ended it).
TEST(GuardAnswerer, ARequestWhoseSlotsAreWrittenAlreadyIsMootAtOnce)
{
	FakeMachine m;
	m.memory = {{0x7100, kRet1}};
	m.threads[101].state = 'S'; // running on, never to stop for it
	m.threads[101].g.seq = 1;
	GuardAnswerer a(m);
	a.answer(request(EACGM_GUARD_RESTORE, 1, {{0x7100, kTramp, kRet1}}));
	EXPECT_LT(m.clock, GuardAnswerer::kRearmWaitNs);
	EXPECT_EQ(a.counts().moot, 1u);
	EXPECT_EQ(m.memory[0x7100], kRet1);
}

TEST(GuardAnswerer, ARearmIsCarriedOutOnlyWhereItsThreadAsked)
{
	FakeMachine m;
	m.memory = {{0x7100, kRet1}};
	auto &t = m.threads[101];
	t.g.seq = 3;
	t.sp = 0x7000 - 8; // its first instruction pushed
	t.ip = 0x9000 + 1;
	GuardAnswerer a(m);
	a.answer(request(EACGM_GUARD_REARM, 3, {{0x7100, kRet1, kTramp}}));
	EXPECT_EQ(m.memory[0x7100], kTramp);
	EXPECT_EQ(a.counts().rearmed, 1u);
	EXPECT_EQ(m.done.count(101), 0u); // a rearm is no restore
	// Stopped elsewhere (freed early, stopped again by another thread's
	// stop), or having asked again since: not touched.
	for (auto [sp, ip, seq] : {std::tuple{0x7000 - 8, 0x9100, 3},
				   {0x7000 + 8, 0x9001, 3},
				   {0x6000, 0x9001, 3},
				   {0x7000 - 8, 0x9001, 4}}) {
		m.memory[0x7100] = kRet1;
		t.sp = sp, t.ip = ip, t.g.seq = seq;
		a.answer(request(EACGM_GUARD_REARM, 3, {{0x7100, kRet1, kTramp}}));
		EXPECT_EQ(m.memory[0x7100], kRet1) << std::hex << sp << " " << ip << " " << seq;
	}
	EXPECT_EQ(a.counts().moot, 4u);
	// A rearm waits less for its stop: freed early, its thread does not stop again for it.
	t.state = 'S';
	t.g.seq = 5;
	const uint64_t before = m.clock;
	a.answer(request(EACGM_GUARD_REARM, 5, {{0x7100, kRet1, kTramp}}));
	EXPECT_GE(m.clock - before, GuardAnswerer::kRearmWaitNs);
	EXPECT_LT(m.clock - before, GuardAnswerer::kRestoreWaitNs);
}

} // namespace
} // namespace eacgm
