// SPDX-License-Identifier: Apache-2.0
// The pipeline driven by fake sources (pipeline/sources.h): no BPF, no /proc.
// A parent and a child it forks, execs and ends; their calls on another ring;
// in serve, a process the filters exclude. Every order the two rings can
// hand their records over in (each ring in its own order, the two
// interleaved any way, cut into rounds anywhere) must give the sinks the
// same spans, processes and threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "common/clock.h"
#include "pipeline/process_table.h"
#include "pipeline/python_join.h"
#include "pipeline/record_loop.h"
#include "pipeline/sources.h"

namespace eacgm {
namespace {

constexpr uint32_t kParent = 4100, kChild = 4101, kChildThread = 4102, kExcluded = 4200;

// What /proc says: every process of the script is there from the start and
// stays, a zombie (readable, with its exit status) once it has exited: as
// the records are read (the running world) or before any is (the ended one:
// the rings read after the job ended).
class FakeSystem : public System {
public:
	struct Proc {
		std::string comm, cmdline;
		uint32_t ppid = 0;
		std::map<uint32_t, std::string> threads;
		std::optional<int> status; // once exited
		std::string environment;   // NUL-separated, as /proc/PID/environ
	};
	std::map<uint32_t, Proc> procs;
	// Set while the source hands records over: nothing may ask /proc then
	// (it would hold up every record behind the one being read).
	bool in_callback = false;
	std::set<uint32_t> watched;
	std::vector<uint32_t> exited; // watched, exited, not yet taken
	size_t maps_read = 0;

	// The kernel ends a process: its pidfd becomes readable, and its exit
	// record is written (the rings hand it over later, or at once).
	void end(uint32_t pid, int status)
	{
		procs.at(pid).status = status;
		if (watched.erase(pid))
			exited.push_back(pid);
	}

	std::string comm(uint32_t pid) override { return find(pid) ? find(pid)->comm : ""; }
	std::string cmdline(uint32_t pid) override { return find(pid) ? find(pid)->cmdline : ""; }
	std::string thread_name(uint32_t pid, uint32_t tid) override
	{
		if (!find(pid) || !find(pid)->threads.count(tid))
			return "";
		return find(pid)->threads.at(tid);
	}
	std::optional<uint32_t> parent(uint32_t pid) override
	{
		return find(pid) ? std::optional(find(pid)->ppid) : std::nullopt;
	}
	CgroupInfo cgroup(uint32_t) override { return {"/job.slice", "", ""}; }
	std::string environment(uint32_t pid) override { return find(pid) ? find(pid)->environment : ""; }
	Result<std::vector<Mapping>> maps(uint32_t pid) override
	{
		maps_read++;
		if (!find(pid))
			return make_error(ErrorKind::NotFound, "no such process");
		Mapping m;
		m.start = 0x7f0000000000;
		m.end = 0x7f0000100000;
		m.path = "/usr/lib/x86_64-linux-gnu/libcudart.so.12";
		return std::vector<Mapping>{m};
	}
	std::vector<uint32_t> threads(uint32_t pid) override
	{
		std::vector<uint32_t> t;
		if (find(pid))
			for (auto &[tid, name] : find(pid)->threads)
				t.push_back(tid);
		return t;
	}
	bool exists(uint32_t pid) override { return find(pid) != nullptr; }
	std::optional<int> exit_status(uint32_t pid) override { return find(pid) ? find(pid)->status : std::nullopt; }
	std::string proc_root() const override { return "/nonexistent/eacgm-test-proc"; }
	// The test's time, not the machine's: what a wait in the pipeline is
	// measured on.
	uint64_t now = 0;
	uint64_t now_ns() override { return now; }

	Result<PidState> watch(uint32_t pid, UniqueFd) override
	{
		if (!find(pid))
			return PidState::gone;
		if (find(pid)->status)
			return PidState::exited;
		watched.insert(pid);
		return PidState::alive;
	}
	void unwatch(uint32_t pid) override
	{
		watched.erase(pid);
		std::erase(exited, pid);
	}
	int exits_fd() const override { return -1; }
	std::vector<uint32_t> take_exited() override { return std::exchange(exited, {}); }

private:
	Proc *find(uint32_t pid)
	{
		EXPECT_FALSE(in_callback) << "the system was asked about pid " << pid << " inside a ring callback";
		auto it = procs.find(pid);
		return it == procs.end() ? nullptr : &it->second;
	}
};

class FakeProbes : public Probes {
public:
	explicit FakeProbes(SpecSet specs) : specs_(std::move(specs)) {}
	const SpecSet &specs() const override { return specs_; }
	void inherit(uint32_t child, uint32_t parent) override { inherited.insert({child, parent}); }
	void forget(uint32_t pid) override { forgotten.insert(pid); }
	Scan scan(uint32_t pid, const std::vector<Mapping> &) override
	{
		scanned.insert(pid);
		return {};
	}
	bool wanted(const std::string &path) const override { return path.find("libcudart") != std::string::npos; }
	Result<void> track(uint32_t pid) override
	{
		tracked.insert(pid);
		return {};
	}
	std::array<uint64_t, EACGM_CNT_COUNT> counters() const override { return {}; }
	Result<std::vector<eacgm_open_call>> open_calls(uint32_t) const override
	{
		return std::vector<eacgm_open_call>{};
	}
	std::vector<std::string> take_warnings() override { return {}; }

	std::set<std::pair<uint32_t, uint32_t>> inherited;
	std::set<uint32_t> forgotten, scanned, tracked;

private:
	SpecSet specs_;
};

// A record of either ring.
struct Rec {
	bool span = false;
	eacgm_span_event s{};
	eacgm_proc_event p{};
};

// Hands over one round of records per consume, as a ring read would.
class FakeSource : public RecordSource {
public:
	FakeSource(std::vector<std::vector<Rec>> rounds, FakeSystem &system) : rounds_(std::move(rounds)), sys_(system)
	{}
	int fd() const override { return -1; }
	Result<int> consume(Records &to) override
	{
		if (next_ == rounds_.size())
			return 0;
		const auto &round = rounds_[next_++];
		sys_.in_callback = true;
		for (const Rec &r : round) {
			if (r.span) {
				to.span(r.s);
				continue;
			}
			// The kernel ends a process before its exit record can be read.
			if (r.p.kind == EACGM_PROC_EXIT)
				sys_.end(r.p.tgid, r.p.exit_code >> 8);
			to.proc(r.p);
		}
		sys_.in_callback = false;
		return int(round.size());
	}
	size_t rounds() const { return rounds_.size(); }

private:
	std::vector<std::vector<Rec>> rounds_;
	size_t next_ = 0;
	FakeSystem &sys_;
};

// What reached the sink: spans as (pid, tid, function, start, duration), the
// last word on each process, the threads, the ticks' times, how often it was
// finished and whether anything came after.
struct Collected : Sink {
	using SpanKey = std::tuple<uint32_t, uint32_t, std::string, uint64_t, uint64_t>;
	std::vector<SpanKey> spans;
	std::map<uint32_t, Process> processes;
	std::set<std::tuple<uint32_t, uint32_t, std::string>> threads;
	std::vector<uint64_t> ticks;
	int finished = 0, after_finish = 0;
	void came() { after_finish += finished > 0; }
	Result<void> write(SpanBatch &b) override
	{
		came();
		for (const Span &s : b.spans)
			spans.emplace_back(s.pid, s.tid, s.name, s.start_ns, s.dur_ns);
		for (size_t i = 0; i < b.typed.size(); i++) {
			Span s = span_at(b.typed, i);
			spans.emplace_back(s.pid, s.tid, s.name, s.start_ns, s.dur_ns);
		}
		return {};
	}
	Result<void> process(const Process &p) override
	{
		came();
		processes[p.pid] = p;
		return {};
	}
	Result<void> thread(const Thread &t) override
	{
		came();
		threads.insert({t.pid, t.tid, t.name});
		return {};
	}
	Result<void> measures(const std::vector<Metric> &, const std::vector<Event> &) override
	{
		came();
		return {};
	}
	Result<void> drops(const std::vector<Drop> &) override
	{
		came();
		return {};
	}
	Result<void> tick(uint64_t now_ns) override
	{
		came();
		ticks.push_back(now_ns);
		return {};
	}
	Result<void> finish() override
	{
		came();
		finished++;
		return {};
	}
};

class Pipeline : public ::testing::Test {
protected:
	void SetUp() override
	{
		auto cuda = load_builtin_spec("cuda");
		ASSERT_TRUE(cuda) << cuda.error().message;
		specs_ = std::move(*cuda);
		malloc_ = probe_index(specs_, "cudaMalloc");
		free_ = probe_index(specs_, "cudaFree");
		ASSERT_LT(malloc_, specs_.probes.size());
		ASSERT_LT(free_, specs_.probes.size());
	}

	FakeSystem world(bool excluded) const
	{
		FakeSystem w;
		// The records are read moments after they were made (t0_ + 100 ns,
		// the last at t0_ + 60): a fork read within a second of its time
		// waits for its parent's verdict (serve), as on a live node,
		// however long the test takes (under qemu-user, minutes).
		w.now = t0_ + 100;
		w.procs[kParent] = {"python", "python train.py", 1, {{kParent, "python"}}, {}};
		w.procs[kChild] = {
			"worker", "worker --rank 1", kParent, {{kChild, "worker"}, {kChildThread, "loader"}}, {}};
		w.procs[kChild].environment = std::string("TORCHELASTIC_RUN_ID=run7\0RANK=1\0", 32);
		if (excluded)
			w.procs[kExcluded] = {"excluded", "excluded --x", 1, {{kExcluded, "excluded"}}, {}};
		return w;
	}

	Rec span(uint32_t pid, uint32_t tid, size_t spec, uint64_t at, uint64_t dur) const
	{
		Rec r{.span = true};
		r.s.start_ns = t0_ + at;
		r.s.dur_ns = dur;
		r.s.tgid = pid;
		r.s.tid = tid;
		r.s.spec_id = uint32_t(spec);
		return r;
	}
	Rec proc(uint32_t kind, uint32_t pid, uint32_t ppid, const char *comm, uint64_t at, int32_t code = 0) const
	{
		Rec r;
		r.p.kind = kind;
		r.p.tgid = pid;
		r.p.ppid = ppid;
		r.p.ts_ns = t0_ + at;
		r.p.exit_code = code;
		std::strncpy(r.p.comm, comm, sizeof r.p.comm - 1);
		return r;
	}

	// Each ring in its own order.
	std::vector<Rec> proc_ring() const
	{
		return {proc(EACGM_PROC_FORK, kChild, kParent, "python", 10),
			proc(EACGM_PROC_EXEC, kChild, kParent, "worker", 20),
			proc(EACGM_PROC_EXIT, kChild, kParent, "worker", 50, 3 << 8),
			proc(EACGM_PROC_EXIT, kParent, 1, "python", 60, 0)};
	}
	std::vector<Rec> span_ring(bool excluded) const
	{
		std::vector<Rec> r = {span(kParent, kParent, malloc_, 5, 100),
				      span(kChild, kChild, malloc_, 12, 200), // before its exec
				      span(kChild, kChild, free_, 30, 300),
				      span(kChild, kChildThread, malloc_, 40, 400),
				      span(kParent, kParent, free_, 55, 500)};
		if (excluded) {
			r.insert(r.begin() + 1, span(kExcluded, kExcluded, malloc_, 7, 600));
			r.push_back(span(kExcluded, kExcluded, free_, 57, 700));
		}
		return r;
	}

	struct Outcome {
		Collected sink;
		uint64_t filtered = 0;
	};
	// The records in `order` (false: the span ring's next, true: the proc
	// ring's next), a round ending after each position `cuts` marks.
	Outcome run(const std::vector<bool> &order, const std::vector<bool> &cuts, bool serve, bool ended) const
	{
		std::vector<Rec> spans = span_ring(serve), procs = proc_ring();
		std::vector<std::vector<Rec>> rounds(1);
		size_t s = 0, p = 0;
		for (size_t i = 0; i < order.size(); i++) {
			rounds.back().push_back(order[i] ? procs[p++] : spans[s++]);
			if (cuts[i])
				rounds.emplace_back();
		}
		Outcome out;
		FakeSystem sys = world(serve);
		if (ended)
			for (const Rec &r : procs)
				if (r.p.kind == EACGM_PROC_EXIT)
					sys.procs.at(r.p.tgid).status = r.p.exit_code >> 8;
		FakeProbes probes(specs_);
		FakeSource source(std::move(rounds), sys);
		RecordLoop rec(probes, sys, source, out.sink);
		rec.open();
		if (serve)
			rec.discover([&](uint32_t pid) { return sys.comm(pid) != "excluded"; });
		else
			rec.add_root(kParent, 1, t0_);
		for (size_t i = 0; i < source.rounds(); i++) {
			auto n = rec.poll(0);
			EXPECT_TRUE(n) << n.error().message;
		}
		auto f = rec.finish();
		EXPECT_TRUE(f) << f.error().message;
		EXPECT_EQ(out.sink.finished, 1);
		EXPECT_EQ(out.sink.after_finish, 0);
		out.filtered = rec.filtered_spans();
		std::sort(out.sink.spans.begin(), out.sink.spans.end());
		return out;
	}

	std::vector<Collected::SpanKey> expected_spans() const
	{
		std::vector<Collected::SpanKey> s = {{kParent, kParent, "cudaMalloc", t0_ + 5, 100},
						     {kParent, kParent, "cudaFree", t0_ + 55, 500},
						     {kChild, kChild, "cudaMalloc", t0_ + 12, 200},
						     {kChild, kChild, "cudaFree", t0_ + 30, 300},
						     {kChild, kChildThread, "cudaMalloc", t0_ + 40, 400}};
		std::sort(s.begin(), s.end());
		return s;
	}

	// Every interleaving of the two rings' records, each cut into rounds
	// in four ways (one round, a round per record, two seeded patterns), in
	// both worlds.
	template <class F>
	void each_order(bool serve, F check) const
	{
		size_t ns = span_ring(serve).size(), np = proc_ring().size();
		std::vector<bool> order(ns + np, false);
		std::fill(order.end() - long(np), order.end(), true);
		std::mt19937 rng(7);
		// serve tracks a process from when it is adopted: one that ended
		// before any record was read would have sent no exit record.
		std::vector<bool> worlds = serve ? std::vector<bool>{false} : std::vector<bool>{false, true};
		size_t runs = 0;
		do {
			std::vector<std::vector<bool>> cut_sets = {std::vector<bool>(order.size(), false),
								   std::vector<bool>(order.size(), true)};
			for (int k = 0; k < 2; k++) {
				std::vector<bool> c(order.size());
				for (size_t i = 0; i < c.size(); i++)
					c[i] = rng() % 3 == 0;
				cut_sets.push_back(c);
			}
			for (auto &cuts : cut_sets)
				for (bool ended : worlds) {
					SCOPED_TRACE(describe(order, cuts) + (ended ? " (ended before read)" : ""));
					check(run(order, cuts, serve, ended));
					runs++;
				}
		} while (std::next_permutation(order.begin(), order.end()));
		EXPECT_GT(runs, 100u);
	}

	static std::string describe(const std::vector<bool> &order, const std::vector<bool> &cuts)
	{
		std::string s;
		for (size_t i = 0; i < order.size(); i++)
			s += std::string(order[i] ? "P" : "S") + (cuts[i] ? " | " : " ");
		return "rings (S span, P process; | a round's end): " + s;
	}

	SpecSet specs_;
	size_t malloc_ = 0, free_ = 0;
	uint64_t t0_ = 1'000'000'000'000; // 1000 s after boot, as CLOCK_MONOTONIC goes
};

// The sinks' tick comes once a second of the system's time, whether records
// came or not, and their finish once, after everything else.
TEST_F(Pipeline, SinksAreTickedOnceASecondAndFinishedOnceLast)
{
	FakeSystem sys = world(false);
	FakeProbes probes(specs_);
	FakeSource source(std::vector<std::vector<Rec>>(7), sys); // nothing read, 7 times
	Collected sink;
	RecordLoop rec(probes, sys, source, sink);
	rec.open();
	rec.add_root(kParent, 1, t0_);
	for (uint64_t i = 0; i < 7; i++) { // a poll every 400 ms: 0 to 2.4 s
		sys.now = t0_ + i * 400'000'000;
		auto n = rec.poll(0);
		ASSERT_TRUE(n) << n.error().message;
	}
	EXPECT_EQ(sink.ticks, (std::vector<uint64_t>{t0_, t0_ + 1'200'000'000, t0_ + 2'400'000'000}));
	EXPECT_EQ(sink.finished, 0);
	auto f = rec.finish();
	ASSERT_TRUE(f) << f.error().message;
	EXPECT_EQ(sink.finished, 1);
	EXPECT_EQ(sink.after_finish, 0);
	EXPECT_EQ(sink.processes.count(kParent), 1u); // the table's last word came before it
}

TEST_F(Pipeline, RecordGivesTheSameSpansProcessesAndThreadsInEveryOrder)
{
	each_order(false, [&](const Outcome &o) {
		EXPECT_EQ(o.sink.spans, expected_spans());
		ASSERT_EQ(o.sink.processes.size(), 2u);
		const Process &p = o.sink.processes.at(kParent), &c = o.sink.processes.at(kChild);
		EXPECT_EQ(std::tie(p.ppid, p.comm, p.cmdline, p.start_ns, p.end_ns, p.exit_code),
			  std::make_tuple(1u, std::string("python"), std::string("python train.py"), t0_, t0_ + 60, 0));
		EXPECT_EQ(std::tie(c.ppid, c.comm, c.cmdline, c.start_ns, c.end_ns, c.exit_code),
			  std::make_tuple(kParent, std::string("worker"), std::string("worker --rank 1"), t0_ + 10,
					  t0_ + 50, 3));
		EXPECT_EQ(p.cgroup, "/job.slice");
		EXPECT_EQ(std::tie(p.job, p.rank), std::make_tuple(std::string(""), -1)); // its launcher said none
		EXPECT_EQ(std::tie(c.job, c.rank), std::make_tuple(std::string("run7"), 1));
		std::set<std::tuple<uint32_t, uint32_t, std::string>> threads = {
			{kParent, kParent, "python"}, {kChild, kChild, "worker"}, {kChild, kChildThread, "loader"}};
		EXPECT_EQ(o.sink.threads, threads);
		EXPECT_EQ(o.filtered, 0u);
	});
}

TEST_F(Pipeline, ServeGivesTheSameSpansProcessesAndThreadsInEveryOrder)
{
	each_order(true, [&](const Outcome &o) {
		EXPECT_EQ(o.sink.spans, expected_spans());
		EXPECT_EQ(o.filtered, 2u); // the excluded process's calls
		ASSERT_EQ(o.sink.processes.size(), 2u);
		const Process &p = o.sink.processes.at(kParent), &c = o.sink.processes.at(kChild);
		EXPECT_EQ(std::tie(p.ppid, p.comm, p.cmdline, p.end_ns, p.exit_code),
			  std::make_tuple(1u, std::string("python"), std::string("python train.py"), t0_ + 60, 0));
		EXPECT_EQ(std::tie(c.ppid, c.comm, c.cmdline, c.end_ns, c.exit_code),
			  std::make_tuple(kParent, std::string("worker"), std::string("worker --rank 1"), t0_ + 50, 3));
		std::set<std::tuple<uint32_t, uint32_t, std::string>> threads = {
			{kParent, kParent, "python"}, {kChild, kChild, "worker"}, {kChild, kChildThread, "loader"}};
		EXPECT_EQ(o.sink.threads, threads);
	});
}

// What the table keeps of a process that had exited when first seen: its
// pidfd says so at once, and the exit record read later gives the time.
TEST(ProcessTable, TheExitRecordsTimeStandsOverThePidfds)
{
	FakeSystem sys;
	sys.procs[10] = {"job", "job --x", 1, {{10, "job"}}, 2};
	ProcessTable table(sys);
	bool created = false;
	EXPECT_EQ(table.get(10, {}, &created).comm, "job");
	EXPECT_TRUE(created);
	table.end_exited(999);
	ASSERT_TRUE(table.exited(10));
	EXPECT_EQ(std::tie(table.find(10)->end_ns, table.find(10)->exit_code), std::make_tuple(uint64_t(999), 2));
	table.exit_record(10, 2, 500);
	EXPECT_EQ(table.find(10)->end_ns, 500u);
	table.get(10, {}, &created);
	EXPECT_FALSE(created);
}

// serve: an ended process goes to the sinks once; a thread of it first seen
// in a call read late goes after it; a pid reused since is a new process.
TEST(ProcessTable, ServeHandsOnAnEndedProcessOnceAndItsLateThreads)
{
	FakeSystem sys;
	sys.procs[10] = {"job", "job --x", 1, {{10, "job"}, {11, "loader"}}, {}};
	ProcessTable table(sys);
	table.forget_ended();
	Collected out;
	table.get(10);
	table.note_thread(10, 10, 5);
	table.name_threads();
	ASSERT_TRUE(table.announce(out));
	table.set_exit(10, 0, 100);
	auto gone = table.retire(out, 150);
	ASSERT_TRUE(gone) << gone.error().message;
	EXPECT_EQ(*gone, std::vector<uint32_t>{10});
	EXPECT_FALSE(table.known(10));
	EXPECT_EQ(out.processes.at(10).end_ns, 100u);
	EXPECT_EQ(out.threads, (std::set<std::tuple<uint32_t, uint32_t, std::string>>{{10, 10, "job"}}));

	EXPECT_TRUE(table.ended_call(10, 40));   // made before its end
	EXPECT_FALSE(table.ended_call(10, 101)); // a process that reuses the pid
	table.note_thread(10, 11, 40);
	out.processes.clear();
	gone = table.retire(out, 160);
	ASSERT_TRUE(gone);
	EXPECT_TRUE(gone->empty());
	EXPECT_TRUE(out.processes.empty()); // not handed on again
	EXPECT_EQ(out.threads,
		  (std::set<std::tuple<uint32_t, uint32_t, std::string>>{{10, 10, "job"}, {10, 11, "loader"}}));
	// Forgotten ten seconds after it was handed on.
	table.sweep(160 + 10'000'000'001);
	EXPECT_FALSE(table.ended_call(10, 40));
}

// serve: a process its pidfd ended (reaped: no exit code left in /proc) is
// handed on once its exit record is read, with the record's code and time,
// or a second later without it.
TEST(ProcessTable, ServeWaitsForTheExitRecordAfterThePidfd)
{
	FakeSystem sys;
	sys.procs[10] = {"job", "job", 1, {}, {}};
	sys.procs[20] = {"other", "other", 1, {}, {}};
	ProcessTable table(sys);
	table.forget_ended();
	Collected out;
	table.get(10);
	table.get(20);
	sys.end(10, 0);
	sys.end(20, 0);
	sys.procs.erase(10); // reaped before the agent looked
	sys.procs.erase(20);
	table.end_exited(1000);
	auto gone = table.retire(out, 1000);
	ASSERT_TRUE(gone);
	EXPECT_TRUE(gone->empty());
	table.exit_record(10, 3, 900);
	gone = table.retire(out, 2000);
	ASSERT_TRUE(gone);
	EXPECT_EQ(*gone, std::vector<uint32_t>{10});
	EXPECT_EQ(std::tie(out.processes.at(10).exit_code, out.processes.at(10).end_ns),
		  std::make_tuple(3, uint64_t(900)));
	gone = table.retire(out, 1000 + 1'000'000'000);
	ASSERT_TRUE(gone);
	EXPECT_EQ(*gone, std::vector<uint32_t>{20}); // no record came
	EXPECT_EQ(std::tie(out.processes.at(20).exit_code, out.processes.at(20).end_ns),
		  std::make_tuple(-1, uint64_t(1000)));
}

// The Python joiner's losses where no stack can resolve (no interpreter
// watched): each sample and each call's stack counted, the cache
// notwithstanding; an eval-loop entry counted; the call shown without a stack.
TEST(PythonJoiner, CountsEveryStackAndEntryItCannotResolve)
{
	FakeSystem sys;
	sys.now = 1'000'000'000'000; // long after the samples' times: each is folded when asked
	ProcessTable table(sys);
	PythonJoiner join(nullptr, table, sys);
	eacgm_py_stack_event e{};
	e.kind = EACGM_PY_SAMPLE;
	e.tgid = e.tid = 10;
	e.nframes = 2;
	e.frames[0].code = 0x1000;
	e.frames[1].code = 0x2000;
	for (uint64_t i = 0; i < 3; i++) {
		e.ts_ns = 100 + i;
		join.record(e, 2);
	}
	eacgm_py_stack_event c = e;
	c.kind = EACGM_PY_SPAN;
	for (uint64_t id : {7, 8}) {
		c.id = id;
		join.record(c, 2);
	}
	join.name_call_stacks();
	eacgm_span_event call{.start_ns = 50, .dur_ns = 5, .tgid = 10, .tid = 10};
	call.py_stack = 7;
	EXPECT_TRUE(join.take_stack(call).empty());
	EXPECT_TRUE(join.peek_stack(8).empty());
	Span entry;
	entry.pid = entry.tid = 10;
	join.eval_entry(entry, call);
	Collected out;
	BudgetHistory budget;
	ASSERT_TRUE(join.flush(out, budget, true));
	ASSERT_TRUE(join.finish(out));
	EXPECT_TRUE(out.spans.empty());
	EXPECT_EQ(join.samples_read(), 3u);
	std::vector<Drop> drops;
	join.drops(drops);
	std::map<std::string, uint64_t> by_reason;
	for (const Drop &d : drops)
		by_reason[d.reason] = d.count;
	EXPECT_EQ(by_reason,
		  (std::map<std::string, uint64_t>{{"unresolved_stack", 5},
						   {"unresolved_entry", 1},
						   {"contradicted_call", 0},
						   {"late_sample", 0}}));
}

} // namespace
} // namespace eacgm
