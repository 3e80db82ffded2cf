// SPDX-License-Identifier: Apache-2.0
// The exception guard against the real unwinder (bpf/span.bpf.c,
// probe/guard_server.h): return probes on C++ functions that an exception,
// pthread_exit or longjmp leaves, in a child process (the agent never stops
// itself, so a throw in this one would meet no guard), with the guard and,
// the control, without it: then the same program aborts.
#include <gtest/gtest.h>

#include <bpf/libbpf.h>
#include <csignal>
#include <fcntl.h>
#include <map>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "probe/elf_symbols.h"
#include "probe/proc_maps.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"
#include "probe/unwind_guard.h"
#include "span_fixture.h"

namespace eacgm::test {

namespace {

const std::string kThrowlib = std::string(TESTPROGS_DIR) + "/libeacgm_throwlib.so";
const std::string kThrowCalls = std::string(TESTPROGS_DIR) + "/throw_calls";
const char *kProbed[] = {"th_outer",      "th_middle",     "th_thrower", "th_count", "th_ok",
			 "th_exit_outer", "th_exit_inner", "th_escape",  "th_jump"};

class UnwindGuard : public ::testing::Test {
protected:
	void open_engine(bool guard)
	{
		auto t = ProcTracker::open(false);
		ASSERT_TRUE(t.ok()) << t.error().message;
		tracker = std::move(t.value());
		SpanEngine::Options o;
		o.guard = guard;
		auto e = SpanEngine::open(o, tracker->traced_map_fd());
		ASSERT_TRUE(e.ok()) << e.error().message;
		engine = std::move(e.value());
		ASSERT_EQ(engine->guarded(), guard);
		// Spec id = index in kProbed, each probe keeping nothing.
		auto elf = ElfFile::open(kThrowlib);
		ASSERT_TRUE(elf.ok()) << elf.error().message;
		std::vector<SpanEngine::Target> targets;
		for (uint32_t id = 0; id < std::size(kProbed); id++) {
			ASSERT_TRUE(engine->set_spec(id, eacgm_probe_spec{}).ok());
			const ElfSymbol *s = elf->find(kProbed[id]);
			ASSERT_NE(s, nullptr) << kProbed[id];
			targets.push_back({elf->vaddr_to_offset(s->addr).value(), id});
		}
		InsnDecoder decoder;
		if (guard) // on the unwinder, C++ runtime and libc this process maps, as the child will
			for (auto &file : mapped_files(read_maps(getpid()).value()))
				if (holds_unwinder(file)) {
					auto lib = ElfFile::open(file);
					ASSERT_TRUE(lib.ok());
					std::vector<SpanEngine::Target> sites;
					for (const GuardSite &g : guard_sites(lib.value(), &decoder))
						sites.push_back({g.file_offset, uint32_t(g.role)});
					ASSERT_TRUE(engine->attach_guard(file, sites).ok()) << file;
				}
		ASSERT_TRUE(engine->attach(kThrowlib, targets).ok());
	}

	// Runs throw_calls PATTERN N, traced, to its end; its wait status.
	int run(const char *pattern, const char *n)
	{
		int gate[2];
		EXPECT_EQ(pipe(gate), 0);
		pid_t pid = fork();
		if (pid == 0) {
			char c;
			close(gate[1]);
			(void)!read(gate[0], &c, 1); // tracked first
			int null = open("/dev/null", O_WRONLY);
			dup2(null, 1), dup2(null, 2);
			execl(kThrowCalls.c_str(), kThrowCalls.c_str(), pattern, n, nullptr);
			_exit(127);
		}
		close(gate[0]);
		EXPECT_TRUE(tracker->track(pid).ok());
		EXPECT_EQ(write(gate[1], "x", 1), 1);
		close(gate[1]);
		int status = 0;
		waitpid(pid, &status, 0);
		return status;
	}

	// Spans by probe name; the records naming an exception's type apart.
	std::map<std::string, std::vector<eacgm_span_event>> spans()
	{
		std::map<std::string, std::vector<eacgm_span_event>> by;
		for (auto &e : collect_spans(*engine))
			by[e.spec_id == EACGM_SPEC_EXCEPTION_TYPE ? "type" : kProbed[e.spec_id]].push_back(e);
		return by;
	}

	std::unique_ptr<ProcTracker> tracker;
	std::unique_ptr<SpanEngine> engine;
};

} // namespace

// The control: with return probes on the frames a throw passes and no
// guard, the program that catches its exception dies in std::terminate.
TEST_F(UnwindGuard, WithoutItAThrowThroughAReturnProbeAborts)
{
	open_engine(false);
	int status = run("throw", "1");
	ASSERT_TRUE(WIFSIGNALED(status)) << status;
	EXPECT_EQ(WTERMSIG(status), SIGABRT);
}

TEST_F(UnwindGuard, AThrowIsCaughtAndItsFramesEndAsSpansLeftByIt)
{
	open_engine(true);
	int status = run("throw", "4");
	ASSERT_TRUE(WIFEXITED(status)) << status;
	EXPECT_EQ(WEXITSTATUS(status), 0);
	auto by = spans();
	ASSERT_EQ(by["th_outer"].size(), 4u);
	ASSERT_EQ(by["th_middle"].size(), 4u);
	ASSERT_EQ(by["th_thrower"].size(), 4u);
	uint64_t type = by["th_outer"][0].ret;
	EXPECT_NE(type, 0u); // the exception's std::type_info: one type, in one child
	// Named once a throw, before the spans it leaves: "St13runtime_error".
	ASSERT_EQ(by["type"].size(), 4u);
	for (size_t i = 0; i < 4; i++) {
		const eacgm_span_event &e = by["type"][i], &outer = by["th_outer"][i];
		EXPECT_EQ(e.ret, type);
		EXPECT_STREQ(reinterpret_cast<const char *>(e.args), "St13runtime_error");
		EXPECT_GT(e.start_ns, outer.start_ns);
		EXPECT_LT(e.start_ns, outer.start_ns + outer.dur_ns);
	}
	for (const char *f : {"th_outer", "th_middle", "th_thrower"})
		for (auto &e : by[f]) {
			EXPECT_EQ(e.flags & EACGM_SPAN_LEFT, EACGM_SPAN_LEFT_EXCEPTION) << f;
			EXPECT_EQ(e.ret, type) << f;
		}
	for (size_t i = 0; i < 4; i++) { // one throw's frames end together, at its catch
		EXPECT_EQ(by["th_outer"][i].start_ns + by["th_outer"][i].dur_ns,
			  by["th_thrower"][i].start_ns + by["th_thrower"][i].dur_ns);
		EXPECT_EQ(by["th_middle"][i].depth, 1);
	}
	// The calls that returned, as before.
	ASSERT_EQ(by["th_count"].size(), 4u);
	ASSERT_EQ(by["th_ok"].size(), 8u);
	for (auto &e : by["th_ok"])
		EXPECT_EQ(e.flags & EACGM_SPAN_LEFT, 0);
	auto c = engine->counters();
	EXPECT_EQ(c[EACGM_CNT_GUARD_REQUESTS], 4u);
	EXPECT_EQ(c[EACGM_CNT_GUARD_UNASKED], 0u);
	EXPECT_EQ(c[EACGM_CNT_LEFT], 12u);
	EXPECT_EQ(c[EACGM_CNT_UNPAIRED], 0u);
	GuardCounts g = engine->guard_counts();
	EXPECT_EQ(g.requests, 4u);
	EXPECT_EQ(g.restored, 12u); // three frames a throw
	EXPECT_EQ(g.failed + g.moot, 0u);
}

TEST_F(UnwindGuard, PthreadExitAndLongjmpLeaveTheirFramesSo)
{
	open_engine(true);
	int status = run("exit", "2");
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
	status = run("longjmp", "3");
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
	auto by = spans();
	ASSERT_EQ(by["th_exit_outer"].size(), 2u);
	ASSERT_EQ(by["th_exit_inner"].size(), 2u);
	for (const char *f : {"th_exit_outer", "th_exit_inner"})
		for (auto &e : by[f])
			EXPECT_EQ(e.flags & EACGM_SPAN_LEFT, EACGM_SPAN_LEFT_FORCED) << f;
	ASSERT_EQ(by["th_jump"].size(), 3u);
	for (auto &e : by["th_jump"]) {
		EXPECT_EQ(e.flags & EACGM_SPAN_LEFT, EACGM_SPAN_LEFT_LONGJMP);
		EXPECT_EQ(e.ret, 0u);
	}
	ASSERT_EQ(by["th_escape"].size(), 3u);
	for (size_t i = 0; i < 3; i++) {
		EXPECT_EQ(by["th_escape"][i].flags & EACGM_SPAN_LEFT, 0);
		EXPECT_EQ(by["th_escape"][i].ret, i + 1);
	}
	EXPECT_EQ(engine->counters()[EACGM_CNT_UNPAIRED], 0u);
	EXPECT_EQ(engine->counters()[EACGM_CNT_EXITED_IN_CALL], 0u);
}

} // namespace eacgm::test
