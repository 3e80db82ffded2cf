// SPDX-License-Identifier: Apache-2.0
// The span engine against real uprobes on the test library: pairing of
// nested and recursive calls, stack arguments, out-pointers read at exit,
// calls left by longjmp, the process filter, and exact loss accounting.
#include <gtest/gtest.h>
#include <stdint.h>
#include <set>
#include <thread>

#include <sched.h>
#include <signal.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "pipeline/bpf_sources.h"
#include "span_fixture.h"

#include "testlib.h"

namespace eacgm::test {

class SpanEngineTest : public SpanFixture {};
INSTANTIATE_TEST_SUITE_P(Links, SpanEngineTest, ::testing::Values(true, false),
			 [](const auto &info) { return info.param ? "multi" : "per_function"; });

TEST_P(SpanEngineTest, NestedCallsPairWithTheirParents)
{
	open_engine();
	probe(1, "tl_outer", {entry_arg(0)});
	probe(2, "tl_inner", {entry_arg(0)});
	for (long i = 0; i < 10; i++)
		tl_outer(i * 10);
	auto ev = collect();
	auto outer = only(ev, 1), inner = only(ev, 2);
	ASSERT_EQ(outer.size(), 10u);
	ASSERT_EQ(inner.size(), 20u);
	for (size_t i = 0; i < outer.size(); i++) {
		EXPECT_EQ(outer[i].depth, 0);
		EXPECT_EQ(outer[i].args[0], i * 10);
		EXPECT_EQ((long)outer[i].ret, tl_outer(i * 10));
		for (int k = 0; k < 2; k++) {
			const auto &in = inner[2 * i + k];
			EXPECT_EQ(in.depth, 1);
			EXPECT_EQ(in.args[0], i * 10 + k); // tl_outer(x) calls tl_inner(x), tl_inner(x+1)
			EXPECT_EQ(in.ret, i * 10 + k + 1);
			EXPECT_GE(in.start_ns, outer[i].start_ns);
			EXPECT_LE(in.start_ns + in.dur_ns, outer[i].start_ns + outer[i].dur_ns);
		}
	}
}

TEST_P(SpanEngineTest, RecursiveCallsPairByStackFrame)
{
	open_engine();
	probe(3, "tl_recurse", {entry_arg(0)});
	ASSERT_EQ(tl_recurse(12), 12);
	auto ev = only(collect(), 3);
	ASSERT_EQ(ev.size(), 13u);
	// Innermost returns first.
	for (size_t i = 0; i < ev.size(); i++) {
		EXPECT_EQ(ev[i].args[0], i);    // depth argument 0, 1, ... 12
		EXPECT_EQ(ev[i].depth, 12 - i); // open calls below it
		EXPECT_EQ(ev[i].ret, i);        // tl_recurse(n) returns n
		if (i > 0) {
			EXPECT_LE(ev[i].start_ns, ev[i - 1].start_ns);
			EXPECT_GE(ev[i].start_ns + ev[i].dur_ns, ev[i - 1].start_ns + ev[i - 1].dur_ns);
		}
	}
}

TEST_P(SpanEngineTest, RecursionDeeperThanTheStackIsCountedNotMispaired)
{
	open_engine();
	probe(3, "tl_recurse", {entry_arg(0)});
	long depth = EACGM_MAX_DEPTH + 8; // 8 levels beyond what a thread remembers
	tl_recurse(depth);
	auto ev = only(collect(), 3);
	ASSERT_EQ(ev.size(), (size_t)EACGM_MAX_DEPTH);
	// The outermost EACGM_MAX_DEPTH calls are recorded with their own arguments.
	for (auto &e : ev)
		EXPECT_EQ((long)e.args[0], depth - e.depth);
	EXPECT_EQ(engine->counters()[EACGM_CNT_DEPTH_OVERFLOW], 9u); // depths 32..40
}

TEST_P(SpanEngineTest, StackArgumentsAndOutPointers)
{
	open_engine();
	probe(4, "tl_eight", {entry_arg(5), entry_arg(6), entry_arg(7)});
	probe(5, "tl_out", {{EACGM_ARG_DEREF_EXIT, 0, 0, 0}, entry_arg(1), {EACGM_ARG_DEREF_ENTRY, 0, 0, 0}});
	tl_eight(1, 2, 3, 4, 5, 6, 7, 8);
	uint64_t v = 42;
	tl_out(&v, 777);
	auto ev = collect();
	auto eight = only(ev, 4), out = only(ev, 5);
	ASSERT_EQ(eight.size(), 1u);
	EXPECT_EQ(eight[0].args[0], 6u);
	EXPECT_EQ(eight[0].args[1], 7u);
	EXPECT_EQ(eight[0].args[2], 8u);
	EXPECT_EQ(eight[0].ret, 36u);
	ASSERT_EQ(out.size(), 1u);
	EXPECT_EQ(out[0].args[0], 777u); // written by the call, read at exit
	EXPECT_EQ(out[0].args[1], 777u);
	EXPECT_EQ(out[0].args[2], 42u); // the same memory read at entry
	EXPECT_EQ((int)out[0].ret, 7);
}

TEST_P(SpanEngineTest, CallsLeftByLongjmpAreDroppedAndCounted)
{
	open_engine();
	probe(6, "tl_escape", {entry_arg(0)});
	probe(7, "tl_jump_deep", {entry_arg(0)});
	for (long i = 0; i < 4; i++)
		tl_escape(i);
	auto ev = collect();
	auto escape = only(ev, 6);
	ASSERT_EQ(escape.size(), 4u);
	EXPECT_EQ(only(ev, 7).size(), 0u);
	for (long i = 0; i < 4; i++) {
		EXPECT_EQ(escape[i].args[0], (uint64_t)i);
		EXPECT_EQ(escape[i].depth, 0);
	}
	EXPECT_EQ(engine->counters()[EACGM_CNT_UNPAIRED], 4u);
}

TEST_P(SpanEngineTest, UntracedProcessesAreFilteredInTheKernel)
{
	open_engine(1u << 20, /*track_self=*/false);
	probe(1, "tl_noop", {entry_arg(0)});
	for (long i = 0; i < 100; i++)
		tl_noop(i);
	EXPECT_EQ(collect().size(), 0u);
	EXPECT_EQ(engine->counters()[EACGM_CNT_SPANS], 0u);
}

TEST_P(SpanEngineTest, AFullRingBufferLosesExactlyWhatItCannotHold)
{
	open_engine(4096);
	probe(1, "tl_noop", {entry_arg(0)});
	const size_t calls = 1000;
	for (size_t i = 0; i < calls; i++)
		tl_noop(i);
	// Nobody consumes during the loop: the buffer holds what fits, each
	// record with its 8-byte header, in all but its last byte (the kernel
	// reserves while producer - consumer stays under the size: 31 records
	// of 128 bytes, not 32).
	size_t fits = (4096 - 1) / kSpanRingRecordBytes;
	auto ev = collect();
	EXPECT_EQ(ev.size(), fits);
	auto c = engine->counters();
	EXPECT_EQ(c[EACGM_CNT_RINGBUF_FULL], calls - fits);
	EXPECT_EQ(c[EACGM_CNT_SPANS], fits);
	for (size_t i = 0; i < ev.size(); i++)
		EXPECT_EQ(ev[i].args[0], i); // the first ones are kept, in order
}

// Keeps this thread on the CPU it runs on, while it lives (the span
// program's per-CPU count of spans decides its wake-ups), then lets it go
// where it could before, whatever ended the test.
struct OnOneCpu {
	cpu_set_t before;
	bool ok = false;
	OnOneCpu()
	{
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(sched_getcpu(), &one);
		ok = sched_getaffinity(0, sizeof(before), &before) == 0 && sched_setaffinity(0, sizeof(one), &one) == 0;
	}
	~OnOneCpu()
	{
		if (ok)
			sched_setaffinity(0, sizeof(before), &before);
	}
};

// The span program asks how full the ring is only on every 32nd span of a
// CPU (fewer on small rings), not on every span. The reader must still be
// woken as soon as a quarter of the ring is filled: on one CPU, with
// power-of-two rings and 128-byte records, at the very record that crosses
// it. Woken means the ring's epoll fd turns ready; with no wake-up it stays
// quiet however full the ring is (ring_buffer__new adds it empty).
TEST_P(SpanEngineTest, TheReaderIsWokenAtAQuarterOfTheRing)
{
	EXPECT_EQ(wakeup_check_mask(4096), 3u);
	EXPECT_EQ(wakeup_check_mask(16384), 15u);
	EXPECT_EQ(wakeup_check_mask(32768), 31u);
	EXPECT_EQ(wakeup_check_mask(8u << 20), 31u);
	OnOneCpu pinned; // one CPU: one count of spans
	ASSERT_TRUE(pinned.ok);
	for (uint32_t ring : {4096u, 16384u, 65536u}) {
		SCOPED_TRACE(ring);
		open_engine(ring);
		probe(1, "tl_noop", {entry_arg(0)});
		auto cb = [](void *, void *, size_t) { return 0; };
		struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(engine->events_map()), cb, nullptr, nullptr);
		ASSERT_NE(rb, nullptr);
		const size_t quarter = ring / 4 / kSpanRingRecordBytes;
		size_t woken_at = 0;
		for (size_t i = 1; i <= 2 * quarter && !woken_at; i++) {
			tl_noop(i);
			struct epoll_event ev;
			if (epoll_wait(ring_buffer__epoll_fd(rb), &ev, 1, 0) == 1)
				woken_at = i;
		}
		ring_buffer__free(rb);
		EXPECT_EQ(woken_at, quarter);
		engine.reset();
	}
}

// The programs time their own run on one call in EACGM_TIMED_EVERY (16) of
// each CPU, the overhead budget's measure of what a call costs beyond its
// trap: on one CPU, 160 calls are 10 timed entries and 10 timed returns
// (calls 7, 23, ..., 151 by the CPU's count of spans), and what they took,
// inside those calls, lies within what this thread measured around them.
TEST_P(SpanEngineTest, TheProgramsTimeOneCallInSixteen)
{
	static_assert(EACGM_TIMED_EVERY == 16);
	OnOneCpu pinned; // one CPU: one count of spans
	ASSERT_TRUE(pinned.ok);
	open_engine(1 << 20);
	probe(1, "tl_noop", {entry_arg(0)});
	const uint64_t t0 = mono_ns();
	for (int i = 0; i < 160; i++)
		tl_noop(i);
	const uint64_t around = mono_ns() - t0;
	auto c = engine->counters();
	EXPECT_EQ(c[EACGM_CNT_SPANS], 160u);
	EXPECT_EQ(c[EACGM_CNT_ENTRIES_TIMED], 10u);
	EXPECT_EQ(c[EACGM_CNT_EXITS_TIMED], 10u);
	EXPECT_GT(c[EACGM_CNT_ENTRY_NS], 0u);
	EXPECT_GT(c[EACGM_CNT_EXIT_NS], 0u);
	EXPECT_LT(c[EACGM_CNT_ENTRY_NS] + c[EACGM_CNT_EXIT_NS], around);
}

// The record loop's wait (BpfRings::fd) is readable when a ring's program woke
// its reader, not whenever a ring holds a record: after a wake-up has been
// read, records the program handed over without waking anyone leave it
// quiet, however many. (libbpf's own, level-triggered epoll stayed readable
// while a burst kept the ring from ever being empty, and the loop came round
// for every few records.)
struct CountingRecords : Records {
	size_t spans = 0;
	void span(const eacgm_span_event &) override { spans++; }
	void proc(const eacgm_proc_event &) override {}
	void py(const eacgm_py_stack_event &, uint32_t) override {}
};

TEST_P(SpanEngineTest, TheRecorderWakesOnlyWhenARingsProgramWakesIt)
{
	OnOneCpu pinned; // one CPU: one count of spans
	ASSERT_TRUE(pinned.ok);
	open_engine(65536);
	probe(1, "tl_noop", {entry_arg(0)});
	auto rings = BpfRings::open(engine->events_map(), tracker->events_map(), nullptr);
	ASSERT_TRUE(rings.ok()) << rings.error().message;
	auto readable = [&] {
		pollfd p = {rings->fd(), POLLIN, 0};
		return ::poll(&p, 1, 0) == 1;
	};
	CountingRecords got;
	const size_t quarter = 65536 / 4 / kSpanRingRecordBytes; // 128 records wake the reader
	for (size_t i = 0; i < quarter - 1; i++)
		tl_noop(i);
	EXPECT_FALSE(readable()) << "woken before a quarter of the ring was filled";
	tl_noop(0);
	EXPECT_TRUE(readable());
	ASSERT_TRUE(rings->consume(got).ok());
	EXPECT_EQ(got.spans, quarter);
	for (size_t i = 0; i < 10; i++)
		tl_noop(i);
	EXPECT_FALSE(readable()) << "readable for records no program woke the reader for";
	ASSERT_TRUE(rings->consume(got).ok()); // read all the same (the record loop's timer)
	EXPECT_EQ(got.spans, quarter + 10);
}

// A call whose return was never seen (here longjmp; under --overhead-budget a
// burst's detach) is dropped at the thread's next entry: a callee enters below
// every live frame, so a frame at or below the entering sp is dead. Without
// that, 40 such calls would fill the thread's stack of 32 and the next calls
// would be lost.
TEST_P(SpanEngineTest, CallsWhoseReturnWasMissedAreDroppedAtTheNextEntry)
{
	open_engine();
	probe(7, "tl_jump_deep", {entry_arg(0)}); // tl_escape itself is not probed
	for (long i = 0; i < 40; i++)
		tl_escape(i);
	probe(1, "tl_noop", {entry_arg(0)});
	tl_noop(5);
	auto ev = collect();
	EXPECT_EQ(only(ev, 7).size(), 0u);
	auto noop = only(ev, 1);
	ASSERT_EQ(noop.size(), 1u);
	EXPECT_EQ(noop[0].depth, 0); // nothing dead left below it
	EXPECT_EQ(engine->counters()[EACGM_CNT_DEPTH_OVERFLOW], 0u);
	EXPECT_EQ(engine->counters()[EACGM_CNT_UNPAIRED], 40u);
}

// Two links on one function (what the budget's relink looks like for a
// moment): each call enters twice at the same sp and returns twice; the
// second entry replaces the first and the second return finds nothing, so
// each call is one span.
TEST_P(SpanEngineTest, TwoLinksOnOneFunctionMakeOneSpanACall)
{
	open_engine();
	probe(1, "tl_noop", {entry_arg(0)});
	probe(1, "tl_noop", {entry_arg(0)});
	for (long i = 0; i < 5; i++)
		tl_noop(i);
	auto noop = only(collect(), 1);
	ASSERT_EQ(noop.size(), 5u);
	for (long i = 0; i < 5; i++) {
		EXPECT_EQ(noop[i].args[0], (uint64_t)i);
		EXPECT_EQ(noop[i].depth, 0);
	}
	EXPECT_EQ(engine->counters()[EACGM_CNT_UNPAIRED], 5u); // the replaced twin entries
}

// --overhead-budget's mechanics: a throttled function leaves the library's
// links (rebuilt without it) and is seen only while a burst's links live;
// the others go on; an empty set puts it back.
TEST_P(SpanEngineTest, ThrottledFunctionsAreSeenOnlyInBursts)
{
	open_engine();
	probe(1, "tl_noop", {entry_arg(0)});
	probe(2, "tl_outer", {entry_arg(0)});
	{
		auto old = engine->set_throttled({1});
		ASSERT_TRUE(old.ok()) << old.error().message;
	} // the old links go here
	EXPECT_EQ(engine->throttled(), (std::set<uint32_t>{1}));
	tl_noop(1);
	tl_outer(100);
	{
		auto burst = engine->attach_throttled();
		ASSERT_TRUE(burst.ok()) << burst.error().message;
		tl_noop(2);
		tl_noop(3);
	}
	tl_noop(4);
	{
		auto old = engine->set_throttled({});
		ASSERT_TRUE(old.ok()) << old.error().message;
	}
	tl_noop(5);
	auto ev = collect();
	std::vector<uint64_t> seen;
	for (auto &e : only(ev, 1))
		seen.push_back(e.args[0]);
	EXPECT_EQ(seen, (std::vector<uint64_t>{2, 3, 5}));
	ASSERT_EQ(only(ev, 2).size(), 1u);
	EXPECT_EQ(only(ev, 2)[0].args[0], 100u);
	EXPECT_EQ(engine->counters()[EACGM_CNT_UNPAIRED], 0u);
}

} // namespace eacgm::test

namespace eacgm::test {

TEST_P(SpanEngineTest, ExitedThreadsGiveBackTheirState)
{
	open_engine();
	probe(1, "tl_noop", {entry_arg(0)});
	std::vector<std::thread> threads;
	for (int t = 0; t < 40; t++)
		threads.emplace_back([t] {
			for (long i = 0; i < 5; i++)
				tl_noop(t * 100 + i);
		});
	for (auto &t : threads)
		t.join();
	EXPECT_EQ(only(collect(), 1).size(), 200u);
	EXPECT_EQ(engine->threads_with_state(), 0u); // 40 threads came and went
	tl_noop(1);
	EXPECT_EQ(engine->threads_with_state(), 1u); // this one is alive
}

} // namespace eacgm::test

namespace eacgm::test {

// CPU time of the calling thread (ns).
static uint64_t thread_cpu_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

// A call's run-queue wait is what its wall time holds beyond the CPU time
// its thread spent in it: a busy loop on CPU 0 sharing it with a spinning
// child process waits to run for part of its time, and the span's duration
// less its runq_ns is the CPU time the thread itself measured around the
// call (a VM's stolen time and the probes' own cost are in the slack).
TEST_P(SpanEngineTest, ACallsRunQueueWaitIsItsWallTimeBeyondItsCpuTime)
{
	open_engine();
	probe(1, "tl_cet_loop", {entry_arg(0)});
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	cpu_set_t before;
	ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
	ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
	int ready[2];
	ASSERT_EQ(pipe(ready), 0);
	pid_t hog = fork();
	ASSERT_GE(hog, 0);
	if (hog == 0) { // pinned with the parent (affinity is inherited): spins until killed
		(void)!write(ready[1], "x", 1);
		for (;;)
			asm volatile("" ::: "memory");
	}
	char c;
	ASSERT_EQ(read(ready[0], &c, 1), 1); // the hog runs
	const uint64_t cpu0 = thread_cpu_ns();
	tl_cet_loop(300'000'000);
	const uint64_t cpu = thread_cpu_ns() - cpu0;
	kill(hog, SIGKILL);
	waitpid(hog, nullptr, 0);
	close(ready[0]);
	close(ready[1]);
	ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);

	auto ev = only(collect(), 1);
	ASSERT_EQ(ev.size(), 1u);
	const auto &e = ev[0];
	ASSERT_TRUE(e.flags & EACGM_SPAN_RUNQ) << "this kernel has CONFIG_SCHED_INFO (/proc/self/schedstat)";
	EXPECT_GT(e.runq_ns, 0u);
	EXPECT_LT(e.runq_ns, e.dur_ns);
	const double on_cpu = double(e.dur_ns - e.runq_ns);
	EXPECT_NEAR(on_cpu, double(cpu), 0.1 * double(e.dur_ns) + 2e6)
		<< "dur " << e.dur_ns << " runq " << e.runq_ns << " thread cpu " << cpu;
}

} // namespace eacgm::test
