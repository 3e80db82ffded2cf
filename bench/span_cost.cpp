// SPDX-License-Identifier: Apache-2.0
// Cost per call of a no-op library function under each way of probing it,
// measured in one run so that the ratios compare like with like:
//   untraced          the plain call
//   floor             empty entry and return programs (bpf/floor.bpf.c): the
//                     kernel's trap cost, which no tracer avoids. Under both
//                     kinds of link the span engine uses (one uprobe_multi
//                     link; a perf-event link per function) on tl_noop, which
//                     starts with "push %rbp" as real library functions do
//                     and which the kernel emulates; and per function on
//                     tl_leaf, whose first instruction the kernel has to
//                     single-step out of line (a second trap per call)
//   eacgm traced      the span engine recording every call (one argument
//                     kept), a consumer draining the ring buffer, under each
//                     kind of link
//   eacgm, filtered   the span engine on a process it does not trace
//   bpftrace          the same entry/return pairing as a bpftrace script, in
//                     a child process (bpftrace attaches perf-event uprobes)
//   endbr64           tl_cet starts with endbr64 (as code built with
//                     -fcf-protection does), which the kernel single-steps:
//                     the floor on it, and eacgm, which probes past it
//   least             the least any tracer does to give every call a span
//                     (bpf/floor.bpf.c): entry time in task storage, a
//                     24-byte record through the ring buffer, no wake-up;
//                     the same spans handed over 32 at a time from a
//                     per-thread batch; and the least of one that only
//                     counts and sums in the kernel. The bound below
//                     eacgm's per-call cost
// And per exception (a C++ throw through three probed frames of the
// exception test library, caught by their caller, in a child process that
// times its own loop): untraced; with only the exception guard's probes on
// the unwinder (what every process on the node pays for a throw while eacgm
// runs); and with the three frames traced too, where the guard stops the
// process to hand their return addresses back (bpf/span.bpf.c).
// Each is compared with the floor of the same kind of link: the kernel does
// different work around the program for each, so against the other floor a
// tracer would gain or lose that difference, not its own cost.
// The configurations take turns, each attached, timed over a fixed number
// of calls and detached, so that the noisy machine's drifts (other tenants,
// frequency) fall on all of them alike; every other round runs them in the
// reverse order (A B C ... C B A ...), so that a drift within a round falls
// on both sides of each comparison. Timed as the
// calling thread's CPU time: the trap, the programs and the return all run on
// that thread, and the time other tasks hold its CPU is left out (in wall time
// rounds came out up to 2x slower while other builds ran, enough to move a
// median; the share of the wall time the loops had a CPU is printed).
// Printed per configuration: the median of the rounds in ns/call, its ratio
// to the floor's median, and the range of the per-round ratios (rounds paired
// by index). The verdict's ratios are the median of the per-round ratios:
// the two sides of one round ran seconds apart, their medians a minute apart
// (on these VMs the ratio of the medians moved by 0.1 between runs of an
// hour). Exits non-zero when
// a traced call's span was lost or not received, the filtered engine wrote a
// span, or bpftrace's histogram did not count every call.
#include <algorithm>
#include <atomic>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <memory>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#include "floor.skel.h"
#include "probe/elf_symbols.h"
#include "probe/first_insn.h"
#include "probe/proc_tracker.h"
#include "probe/proc_maps.h"
#include "probe/span_engine.h"
#include "probe/unwind_guard.h"

#include "testlib.h"

extern char **environ;

using namespace eacgm;
using Clock = std::chrono::steady_clock;

namespace {

// The test library as the loader mapped it into this process: the file the
// probes must go on, wherever it was found (a build's, or one carried to
// another machine with LD_LIBRARY_PATH: probes on another copy of it never
// fire). Where the build put it if dladdr cannot tell.
std::string testlib_path()
{
	Dl_info info{};
	if (dladdr(reinterpret_cast<void *>(&tl_noop), &info) && info.dli_fname && info.dli_fname[0] == '/')
		return info.dli_fname;
	return std::string(TESTPROGS_DIR) + "/libeacgm_testlib.so";
}
const std::string kLib = testlib_path();

// Thrown, so that the destructors below detach the probes and stop bpftrace.
[[noreturn]] void die(const std::string &m) { throw std::runtime_error(m); }

std::string errstr() { return strerror(errno); }

uint64_t file_offset(const ElfFile &elf, const char *name);

// ---- Owners of what a round attaches: detached when they go out of scope.

struct LinkDeleter {
	void operator()(bpf_link *l) const { bpf_link__destroy(l); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;

struct FloorDeleter {
	void operator()(floor_bpf *s) const { floor_bpf__destroy(s); }
};
using FloorSkel = std::unique_ptr<floor_bpf, FloorDeleter>;

struct Fd {
	int fd;
	explicit Fd(int f) : fd(f) {}
	Fd(Fd &&o) noexcept : fd(std::exchange(o.fd, -1)) {}
	~Fd()
	{
		if (fd >= 0)
			close(fd);
	}
};

// BPF_TRACE_UPROBE_MULTI and BPF_F_UPROBE_MULTI_RETURN (6.6+): the system's
// UAPI headers (6.1) do not name them, and libbpf 1.1 cannot make such a link,
// so it is made with the bpf() syscall, as SpanEngine::attach_multi does.
constexpr auto kTraceUprobeMulti = (enum bpf_attach_type)48;
constexpr uint32_t kUprobeMultiReturn = 1;

// link_create's uprobe_multi part of the kernel's union bpf_attr.
struct UprobeMultiAttr {
	uint32_t prog_fd, target_fd, attach_type, flags;
	uint64_t path, offsets, ref_ctr_offsets, cookies;
	uint32_t cnt, multi_flags, pid, pad;
};

Fd attach_multi(const bpf_program *prog, uint64_t off, bool ret)
{
	UprobeMultiAttr a{};
	a.prog_fd = bpf_program__fd(prog);
	a.attach_type = kTraceUprobeMulti;
	a.path = (uint64_t)(uintptr_t)kLib.c_str();
	a.offsets = (uint64_t)(uintptr_t)&off;
	a.cnt = 1;
	a.multi_flags = ret ? kUprobeMultiReturn : 0;
	int fd = syscall(__NR_bpf, BPF_LINK_CREATE, &a, sizeof(a));
	if (fd < 0)
		die("cannot make a uprobe_multi link: " + errstr());
	return Fd(fd);
}

Link attach_per_function(const bpf_program *prog, uint64_t off, bool ret)
{
	LIBBPF_OPTS(bpf_uprobe_opts, o, .retprobe = ret);
	Link l(bpf_program__attach_uprobe_opts(prog, -1, kLib.c_str(), off, &o));
	if (!l)
		die("cannot attach a uprobe: " + errstr());
	return l;
}

// The empty programs, loaded once; the uprobe_multi pair where the kernel
// has such links.
struct Floor {
	FloorSkel skel;
	bool multi = false;
};

Floor load_floor()
{
	for (bool multi : {true, false}) {
		FloorSkel s(floor_bpf__open());
		if (!s)
			die("cannot open the floor programs");
		for (bpf_program *p :
		     {s->progs.floor_entry_multi, s->progs.floor_exit_multi, s->progs.least_entry_multi,
		      s->progs.least_exit_multi, s->progs.batch_exit_multi, s->progs.tally_exit_multi})
			if (multi)
				bpf_program__set_expected_attach_type(p, kTraceUprobeMulti);
			else
				bpf_program__set_autoload(p, false);
		if (!floor_bpf__load(s.get()))
			return {std::move(s), multi};
	}
	die("cannot load the floor programs (root needed)");
}

// The empty entry and return programs on one function.
struct FloorProbes {
	std::vector<Link> links;
	std::vector<Fd> multi;
};

FloorProbes attach_floor(const Floor &f, uint64_t off, bool multi)
{
	FloorProbes p;
	if (multi) {
		p.multi.push_back(attach_multi(f.skel->progs.floor_entry_multi, off, false));
		p.multi.push_back(attach_multi(f.skel->progs.floor_exit_multi, off, true));
	} else {
		p.links.push_back(attach_per_function(f.skel->progs.floor_entry, off, false));
		p.links.push_back(attach_per_function(f.skel->progs.floor_exit, off, true));
	}
	return p;
}

// The least a tracer can do per call (bpf/floor.bpf.c): the entry time kept
// per thread, and at return a span handed over (least_exit_multi) or only
// counted and summed in the kernel (tally_exit_multi), or handed over 32 at
// a time (batch_exit_multi). uprobe_multi only.
FloorProbes attach_least(const Floor &f, uint64_t off, const bpf_program *exit)
{
	FloorProbes p;
	p.multi.push_back(attach_multi(f.skel->progs.least_entry_multi, off, false));
	p.multi.push_back(attach_multi(exit, off, true));
	return p;
}

// The calling thread's time on a CPU, in ns.
double thread_cpu_ns()
{
	timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

// Wall and CPU time of all the timed loops: how much of it others took.
struct {
	double wall = 0, cpu = 0;
} timed;

// ns per call, of the calling thread's CPU time.
double time_calls(long (*fn)(long), long calls)
{
	auto w0 = Clock::now();
	double c0 = thread_cpu_ns();
	long acc = 0;
	for (long i = 0; i < calls; i++)
		acc += fn(i);
	double cpu = thread_cpu_ns() - c0;
	timed.wall += std::chrono::duration<double, std::nano>(Clock::now() - w0).count();
	timed.cpu += cpu;
	if (acc == -1)
		puts("");
	return cpu / calls;
}

// ---- The span engine.

// What the checks count over all rounds.
struct Tally {
	long expected = 0, received = 0; // spans of traced calls
	uint64_t lost = 0;               // ring buffer full
	uint64_t filtered_spans = 0;     // from the process not traced: must stay 0
	long bpftrace_calls = 0, bpftrace_counted = 0;
	long least_calls = 0, least_received = 0; // the least hand-over's spans
	long tally_calls = 0, tally_counted = 0;  // counted in the kernel
};

struct Eacgm {
	std::unique_ptr<ProcTracker> tracker;
	std::unique_ptr<SpanEngine> engine;
};

// The span engine on tl_noop, keeping its argument; the process is not
// traced until tracked.
Eacgm open_eacgm(uint64_t off, bool multi)
{
	auto tracker = ProcTracker::open(false);
	if (!tracker)
		die(tracker.error().message);
	SpanEngine::Options o;
	o.multi_link = multi;
	auto engine = SpanEngine::open(o, (*tracker)->traced_map_fd());
	if (!engine)
		die(engine.error().message);
	if ((*engine)->multi_link() != multi)
		die("the span engine did not take the kind of link asked for");
	eacgm_probe_spec spec{};
	spec.nargs = 1;
	spec.args[0] = {EACGM_ARG_ENTRY, 0, 0, 0};
	if (!(*engine)->set_spec(0, spec).ok() || !(*engine)->attach(kLib, {{off, 0}}).ok())
		die("cannot attach the span engine");
	return {std::move(*tracker), std::move(*engine)};
}

// Drains the span ring buffer on a thread of its own, as the agent does,
// counting the records.
class Consumer {
public:
	// record_bytes: a record counts as its size over this many (spans
	// handed over in batches); 0: each record is one.
	explicit Consumer(bpf_map *events, size_t record_bytes = 0)
		: record_bytes_(record_bytes), rb_(ring_buffer__new(bpf_map__fd(events), on_record, this, nullptr))
	{
		if (!rb_)
			die("cannot open the span ring buffer: " + errstr());
		thread_ = std::thread([this] {
			while (!stop_)
				ring_buffer__poll(rb_, 10);
		});
	}
	~Consumer()
	{
		finish();
		ring_buffer__free(rb_);
	}
	// Stops the thread, reads what is left; the records received.
	long finish()
	{
		if (thread_.joinable()) {
			stop_ = true;
			thread_.join();
			ring_buffer__consume(rb_);
		}
		return received_;
	}

private:
	static int on_record(void *ctx, void *, size_t size)
	{
		auto *c = static_cast<Consumer *>(ctx);
		c->received_.fetch_add(c->record_bytes_ ? (long)(size / c->record_bytes_) : 1);
		return 0;
	}
	size_t record_bytes_;
	std::atomic<long> received_{0};
	std::atomic<bool> stop_{false};
	ring_buffer *rb_;
	std::thread thread_;
};

double eacgm_traced(uint64_t off, bool multi, long calls, Tally &t, long (*fn)(long) = tl_noop)
{
	Eacgm e = open_eacgm(off, multi);
	if (!e.tracker->track(getpid()).ok())
		die("cannot track this process");
	Consumer consumer(e.engine->events_map());
	double ns = time_calls(fn, calls);
	t.expected += calls;
	t.received += consumer.finish();
	t.lost += e.engine->counters()[EACGM_CNT_RINGBUF_FULL];
	return ns;
}

double eacgm_filtered(uint64_t off, bool multi, long calls, Tally &t)
{
	Eacgm e = open_eacgm(off, multi);
	double ns = time_calls(tl_noop, calls);
	t.filtered_spans += e.engine->counters()[EACGM_CNT_SPANS];
	return ns;
}

// ---- bpftrace, in a child process.

// A child with its stdout and stderr on a pipe; interrupted and waited for
// when it goes out of scope.
struct Child {
	pid_t pid = -1;
	int out = -1;
	std::string output;

	explicit Child(const std::vector<std::string> &args)
	{
		int p[2];
		if (pipe2(p, O_CLOEXEC))
			die("pipe: " + errstr());
		out = p[0];
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, p[1], 1);
		posix_spawn_file_actions_adddup2(&fa, p[1], 2);
		std::vector<char *> argv;
		for (auto &a : args)
			argv.push_back(const_cast<char *>(a.c_str()));
		argv.push_back(nullptr);
		int err = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
		posix_spawn_file_actions_destroy(&fa);
		close(p[1]);
		if (err) {
			close(out);
			die("cannot start " + args[0] + ": " + strerror(err));
		}
	}
	Child(const Child &) = delete;
	~Child()
	{
		if (pid > 0)
			stop();
		close(out);
	}
	// Appends what the child wrote within timeout_ms; false once it closed
	// its end (exited).
	bool read_some(int timeout_ms)
	{
		pollfd pfd{out, POLLIN, 0};
		if (poll(&pfd, 1, timeout_ms) <= 0)
			return true;
		char buf[4096];
		ssize_t n = read(out, buf, sizeof(buf));
		if (n > 0)
			output.append(buf, n);
		return n > 0 || (n < 0 && errno == EINTR);
	}
	// SIGINT, then reads the rest of its output and waits; its wait status.
	// bpftrace 0.17 looks at SIGINT only as an interrupted epoll_wait in its
	// event loop: one that comes before the loop is lost, so it is sent
	// again while the child stays silent (a second one once it is printing
	// its maps would kill it).
	int stop()
	{
		size_t silent = output.size();
		for (auto next = Clock::now();;) {
			if (output.size() == silent && Clock::now() >= next) {
				kill(pid, SIGINT);
				next += std::chrono::seconds(1);
			}
			if (!read_some(100))
				break;
		}
		int status = 0;
		waitpid(pid, &status, 0);
		pid = -1;
		return status;
	}
};

// The path of an executable on PATH; empty when there is none.
std::string find_on_path(const char *name)
{
	const char *path = getenv("PATH");
	std::istringstream dirs(path ? path : "/usr/bin:/bin");
	for (std::string d; std::getline(dirs, d, ':');) {
		std::string f = (d.empty() ? "." : d) + "/" + name;
		if (access(f.c_str(), X_OK) == 0)
			return f;
	}
	return "";
}

// Whether a process holds perf-event uprobes at a file offset, entry and
// return, each with a BPF program on it (what bpftool perf lists).
bool uprobes_attached(pid_t pid, uint64_t off)
{
	std::string dir = "/proc/" + std::to_string(pid) + "/fd";
	std::unique_ptr<DIR, int (*)(DIR *)> d(opendir(dir.c_str()), closedir);
	bool entry = false, ret = false;
	while (d && !(entry && ret)) {
		dirent *e = readdir(d.get());
		if (!e)
			break;
		char buf[PATH_MAX];
		__u32 len = sizeof(buf), prog = 0, type = 0;
		__u64 probe_off = 0, addr = 0;
		if (bpf_task_fd_query(pid, atoi(e->d_name), 0, buf, &len, &prog, &type, &probe_off, &addr) ||
		    probe_off != off)
			continue;
		entry |= type == BPF_FD_TYPE_UPROBE;
		ret |= type == BPF_FD_TYPE_URETPROBE;
	}
	return entry && ret;
}

// bpftrace 0.17 prints "Attaching N probes..." before it creates its maps and
// attaches (BPFtrace::prerun, then run), so the line alone is not enough:
// after it, its two uprobes are looked for until both carry its programs.
void wait_attached(Child &c, uint64_t off)
{
	auto deadline = Clock::now() + std::chrono::seconds(60);
	for (;;) {
		bool announced = c.output.find("Attaching ") != std::string::npos;
		if (announced && uprobes_attached(c.pid, off))
			return;
		if (!c.read_some(announced ? 1 : 100))
			die("bpftrace exited before attaching:\n" + c.output);
		if (Clock::now() > deadline)
			die("bpftrace did not attach in 60 s:\n" + c.output);
	}
}

// The calls that bpftrace paired: the sum of its @ns histogram, which it
// prints when interrupted ("[256, 512)   19998 |@@@@|").
long histogram_count(const std::string &output)
{
	size_t at = output.find("@ns:");
	std::istringstream in(at == std::string::npos ? "" : output.substr(at));
	long n = 0;
	for (std::string line; std::getline(in, line);)
		if (!line.empty() && line[0] == '[')
			n += atol(line.c_str() + line.find_first_of(")]") + 1);
	return n;
}

double bpftrace_round(const std::string &exe, uint64_t off, long calls, Tally &t)
{
	std::string at = ":" + kLib + ":tl_noop";
	std::string script = "uprobe" + at + " { @start[tid] = nsecs; } uretprobe" + at +
		" /@start[tid]/ { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }";
	Child c({exe, "-e", script});
	wait_attached(c, off);
	double ns = time_calls(tl_noop, calls);
	int status = c.stop();
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		die("bpftrace failed:\n" + c.output);
	t.bpftrace_calls += calls;
	t.bpftrace_counted += histogram_count(c.output);
	return ns;
}

// ---- The least a tracer can do.

constexpr size_t kLeastSpanBytes = 24; // struct least_span

// Spans handed over one by one, or in batches of 32 (calls is a multiple of 32).
double least_round(const Floor &f, uint64_t off, long calls, bool batched, Tally &t)
{
	FloorProbes p = attach_least(f, off, batched ? f.skel->progs.batch_exit_multi : f.skel->progs.least_exit_multi);
	Consumer consumer(f.skel->maps.least_events, kLeastSpanBytes);
	double ns = time_calls(tl_noop, calls);
	t.least_calls += calls;
	t.least_received += consumer.finish();
	return ns;
}

// The calls the in-kernel tally holds, over every CPU.
long tally_calls(const Floor &f)
{
	std::vector<uint64_t> v(libbpf_num_possible_cpus());
	uint32_t key = 0;
	if (bpf_map_lookup_elem(bpf_map__fd(f.skel->maps.tally), &key, v.data()))
		die("cannot read the in-kernel tally: " + errstr());
	long n = 0;
	for (uint64_t c : v)
		n += (long)c;
	return n;
}

double tally_round(const Floor &f, uint64_t off, long calls, Tally &t)
{
	long before = tally_calls(f);
	double ns;
	{
		FloorProbes p = attach_least(f, off, f.skel->progs.tally_exit_multi);
		ns = time_calls(tl_noop, calls);
	}
	t.tally_calls += calls;
	t.tally_counted += tally_calls(f) - before;
	return ns;
}

// ---- The configurations, in the order they take turns.

// ---- Per exception.

const std::string kThrowlib = std::string(TESTPROGS_DIR) + "/libeacgm_throwlib.so";
const std::string kThrowCalls = std::string(TESTPROGS_DIR) + "/throw_calls";

// The span engine with its exception guard on the unwinder, C++ runtime and
// libc this process maps (the child maps the same files); with `frames`,
// also traced th_outer, th_middle and th_thrower, the frames a throw passes.
Eacgm open_guard(bool frames)
{
	auto tracker = ProcTracker::open(false);
	if (!tracker)
		die(tracker.error().message);
	auto engine = SpanEngine::open(SpanEngine::Options{}, (*tracker)->traced_map_fd());
	if (!engine)
		die(engine.error().message);
	if (!(*engine)->guarded())
		die("no exception guard here: " + (*engine)->unguarded_reason());
	auto maps = read_maps(getpid());
	if (!maps)
		die(maps.error().message);
	InsnDecoder decoder;
	for (auto &file : mapped_files(*maps))
		if (holds_unwinder(file)) {
			auto lib = ElfFile::open(file);
			if (!lib)
				die(lib.error().message);
			std::vector<SpanEngine::Target> sites;
			for (const GuardSite &g : guard_sites(*lib, &decoder))
				sites.push_back({g.file_offset, uint32_t(g.role)});
			if (!(*engine)->attach_guard(file, sites).ok())
				die("cannot attach the exception guard to " + file);
		}
	if (frames) {
		auto lib = ElfFile::open(kThrowlib);
		if (!lib)
			die(lib.error().message);
		std::vector<SpanEngine::Target> targets;
		uint32_t id = 0;
		for (const char *f : {"th_outer", "th_middle", "th_thrower"}) {
			if (!(*engine)->set_spec(id, eacgm_probe_spec{}).ok())
				die("cannot store a probe spec");
			targets.push_back({file_offset(*lib, f), id++});
		}
		if (!(*engine)->attach(kThrowlib, targets).ok())
			die("cannot attach to " + kThrowlib);
	}
	return {std::move(*tracker), std::move(*engine)};
}

// throw_calls time N in a child, tracked by `e` when given before it
// starts: the wall time of one throw, as the child measured it.
double child_throws(long n, Eacgm *e)
{
	int gate[2], out[2];
	if (pipe(gate) != 0 || pipe(out) != 0)
		die("pipe: " + errstr());
	pid_t pid = fork();
	if (pid == 0) {
		char c;
		close(gate[1]), close(out[0]);
		if (read(gate[0], &c, 1) != 1)
			_exit(126);
		dup2(out[1], 1);
		execl(kThrowCalls.c_str(), kThrowCalls.c_str(), "time", std::to_string(n).c_str(), nullptr);
		_exit(127);
	}
	close(gate[0]), close(out[1]);
	if (e && !e->tracker->track(pid).ok())
		die("cannot track the child");
	if (write(gate[1], "x", 1) != 1)
		die("cannot start the child");
	close(gate[1]);
	std::string text;
	char buf[256];
	for (ssize_t k; (k = read(out[0], buf, sizeof buf)) > 0;)
		text.append(buf, size_t(k));
	close(out[0]);
	int status = 0;
	waitpid(pid, &status, 0);
	double ns = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || sscanf(text.c_str(), "ns per throw %lf", &ns) != 1)
		die("throw_calls time " + std::to_string(n) + " ended with status " + std::to_string(status) + ": " +
		    text);
	return ns;
}

struct Throws {
	std::vector<double> untraced, guard, traced, held;
};

// Rounds in turn (A B C C B A ...), as the per-call ones.
Throws exception_rounds(long n, int rounds)
{
	Throws t;
	std::function<void()> runs[] = {
		[&] { t.untraced.push_back(child_throws(n, nullptr)); },
		[&] {
			Eacgm e = open_guard(false);
			t.guard.push_back(child_throws(n, &e));
		},
		[&] {
			Eacgm e = open_guard(true);
			t.traced.push_back(child_throws(n, &e));
			const GuardCounts g = e.engine->guard_counts();
			if (g.requests != uint64_t(n) || g.restored != 3 * uint64_t(n) || g.failed || g.moot)
				die("the guard answered " + std::to_string(g.requests) + " requests of " +
				    std::to_string(n));
			t.held.push_back(double(g.held_ns) / double(g.requests));
		},
	};
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < 3; k++)
			runs[r % 2 ? 2 - k : k]();
	return t;
}

struct Bench {
	long calls = 20000;
	int rounds = 16;                 // even: as many in each order
	uint64_t noop = 0, leaf = 0;     // file offsets of the functions
	uint64_t cet = 0, cet_probe = 0; // tl_cet (endbr64 first) and where eacgm probes it
	Floor floor;
	std::string bpftrace; // its path; empty: not installed
	Tally tally;
	long throws = 200; // per round, of the exceptions' rounds
};

enum {
	kUntraced,
	kFloorMulti,
	kFloorPerFn,
	kFloorStep,
	kEacgmMulti,
	kEacgmPerFn,
	kFiltered,
	kBpftrace,
	kFloorCet,
	kEacgmCet,
	kLeast,
	kLeastBatched,
	kTally
};

struct Config {
	const char *name;
	int floor;                     // the configuration it is compared with; -1: none
	std::function<double()> round; // attaches, times the calls, detaches: ns/call
	std::string na;                // why it cannot run here; empty: it runs
	std::vector<double> ns = {};   // per round
};

std::vector<Config> make_configs(Bench &b)
{
	std::string no_multi = b.floor.multi ? "" : "n/a (no uprobe_multi links in this kernel)";
	auto floor = [&b](uint64_t off, long (*fn)(long), bool multi) {
		return [&b, off, fn, multi] {
			FloorProbes p = attach_floor(b.floor, off, multi);
			return time_calls(fn, b.calls);
		};
	};
	return {
		{"untraced", -1, [&b] { return time_calls(tl_noop, b.calls); }},
		{"floor, uprobe_multi link", -1, floor(b.noop, tl_noop, true), no_multi},
		{"floor, per-function links", -1, floor(b.noop, tl_noop, false)},
		{"floor, per-function, single-stepped", kFloorPerFn, floor(b.leaf, tl_leaf, false)},
		{"eacgm traced, uprobe_multi link", kFloorMulti,
		 [&b] { return eacgm_traced(b.noop, true, b.calls, b.tally); }, no_multi},
		{"eacgm traced, per-function links", kFloorPerFn,
		 [&b] { return eacgm_traced(b.noop, false, b.calls, b.tally); }},
		{"eacgm, process not traced (filtered)", b.floor.multi ? kFloorMulti : kFloorPerFn,
		 [&b] { return eacgm_filtered(b.noop, b.floor.multi, b.calls, b.tally); }},
		{"bpftrace, same pairing", kFloorPerFn,
		 [&b] { return bpftrace_round(b.bpftrace, b.noop, b.calls, b.tally); },
		 b.bpftrace.empty() ? "n/a (bpftrace not installed)" : ""},
		// A function built with -fcf-protection: on its endbr64 the kernel
		// single-steps; eacgm probes the push after it (InsnDecoder::probe_offset).
		{"floor, per-function, on endbr64", kFloorPerFn, floor(b.cet, tl_cet, false)},
		{"eacgm per-function, past endbr64", kFloorPerFn,
		 [&b] { return eacgm_traced(b.cet_probe, false, b.calls, b.tally, tl_cet); }},
		// What no tracer that hands every call to user space goes below.
		{"least span hand-over, uprobe_multi", kFloorMulti,
		 [&b] { return least_round(b.floor, b.noop, b.calls, false, b.tally); }, no_multi},
		{"least, spans handed over 32 at a time", kFloorMulti,
		 [&b] { return least_round(b.floor, b.noop, b.calls, true, b.tally); }, no_multi},
		{"least in-kernel count, uprobe_multi", kFloorMulti,
		 [&b] { return tally_round(b.floor, b.noop, b.calls, b.tally); }, no_multi},
	};
}

void run_rounds(std::vector<Config> &cs, int rounds)
{
	for (int r = 0; r < rounds; r++)
		for (size_t k = 0; k < cs.size(); k++) {
			Config &c = cs[r % 2 ? cs.size() - 1 - k : k];
			if (c.na.empty())
				c.ns.push_back(c.round());
		}
}

// ---- Report.

double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	size_t n = v.size();
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Ratio of the medians; the median and the range of the ratios of rounds
// run side by side.
struct Ratio {
	double median, paired, lo, hi;
};

Ratio ratio(const std::vector<double> &a, const std::vector<double> &b)
{
	std::vector<double> per_round;
	for (size_t i = 0; i < a.size() && i < b.size(); i++)
		per_round.push_back(a[i] / b[i]);
	auto [lo, hi] = std::minmax_element(per_round.begin(), per_round.end());
	return {median(a) / median(b), median(per_round), *lo, *hi};
}

void print_row(const Config &c, const std::vector<Config> &cs)
{
	if (!c.na.empty()) {
		printf("  %-38s %s\n", c.name, c.na.c_str());
		return;
	}
	printf("  %-38s %9.1f", c.name, median(c.ns));
	if (c.floor >= 0 && cs[c.floor].na.empty()) {
		Ratio r = ratio(c.ns, cs[c.floor].ns);
		printf(" %7.2fx  %5.2f..%-6.2f %s", r.median, r.lo, r.hi,
		       c.floor == kFloorMulti ? "uprobe_multi" : "per-function");
	}
	printf("\n");
}

void print_machine()
{
	std::ifstream in("/proc/cpuinfo");
	std::string line, model = "unknown CPU";
	bool vm = false;
	while (std::getline(in, line)) {
		if (line.rfind("model name", 0) == 0 && model == "unknown CPU")
			model = line.substr(line.find(':') + 2);
		if (line.rfind("flags", 0) == 0)
			vm |= line.find(" hypervisor") != std::string::npos;
	}
	utsname u{};
	uname(&u);
	printf("machine: %s, %ld CPUs%s, Linux %s\n", model.c_str(), sysconf(_SC_NPROCESSORS_ONLN),
	       vm ? " (virtual machine)" : "", u.release);
}

void print_table(const Bench &b, const std::vector<Config> &cs)
{
	printf("cost per call of a no-op library function: median of %d rounds of %ld calls, configurations in turn\n",
	       b.rounds, b.calls);
	printf("  %-38s %9s %8s  %-12s %s\n", "", "ns/call", "vs floor", "per round", "floor");
	for (auto &c : cs)
		print_row(c, cs);
	if (cs[kFloorMulti].na.empty()) {
		Ratio r = ratio(cs[kFloorPerFn].ns, cs[kFloorMulti].ns);
		printf("  the per-function floor is %.2fx the uprobe_multi floor (per round %.2f..%.2f)\n", r.median,
		       r.lo, r.hi);
	}
}

// The checks and the verdict; the exit status.
int verdict(const Bench &b, const std::vector<Config> &cs)
{
	const Tally &t = b.tally;
	printf("  spans received %ld of %ld traced calls, lost %llu\n", t.received, t.expected,
	       (unsigned long long)t.lost);
	bool ok = t.received == t.expected && t.lost == 0;
	if (t.filtered_spans) {
		printf("  the filtered engine wrote %llu spans for a process it does not trace\n",
		       (unsigned long long)t.filtered_spans);
		ok = false;
	}
	if (!b.bpftrace.empty()) {
		printf("  bpftrace counted %ld of %ld calls\n", t.bpftrace_counted, t.bpftrace_calls);
		ok &= t.bpftrace_counted == t.bpftrace_calls;
	}
	if (cs[kLeast].na.empty()) {
		printf("  the least hand-overs received %ld of %ld spans; the in-kernel count %ld of %ld calls\n",
		       t.least_received, t.least_calls, t.tally_counted, t.tally_calls);
		ok &= t.least_received == t.least_calls && t.tally_counted == t.tally_calls;
	}
	int traced = cs[kEacgmMulti].na.empty() ? kEacgmMulti : kEacgmPerFn;
	printf("  the timed loops had a CPU %.0f%% of their wall time\n", 100 * timed.cpu / timed.wall);
	// The medians of the rounds' ratios, the ratios of the medians beside.
	Ratio e = ratio(cs[traced].ns, cs[cs[traced].floor].ns);
	printf("eacgm per call: %.2fx the floor (ratio of medians %.2fx)%s\n", e.paired, e.median,
	       traced == kEacgmMulti ? "" : " with per-function links");
	if (cs[kLeast].na.empty()) {
		Ratio l = ratio(cs[kLeast].ns, cs[kFloorMulti].ns),
		      lb = ratio(cs[kLeastBatched].ns, cs[kFloorMulti].ns),
		      el = ratio(cs[kEacgmMulti].ns, cs[kLeast].ns);
		printf("the least span hand-over: %.2fx the floor (in batches of 32 %.2fx); eacgm %.2fx the least "
		       "hand-over (per round %.2f..%.2f; ratio of medians %.2fx)\n",
		       l.paired, lb.paired, el.paired, el.lo, el.hi, el.median);
	}
	return ok ? 0 : 1;
}

void print_exceptions(const Throws &t, const Bench &b)
{
	printf("cost per exception (a C++ throw through three probed frames, caught by their caller): median of %d "
	       "rounds of %ld throws, in a child\n",
	       b.rounds, b.throws);
	const double base = median(t.untraced);
	printf("  %-38s %9.1f\n", "untraced", base / 1e3);
	printf("  %-38s %9.1f  (+%.1f: the unwinder's probes)\n", "eacgm's guard, frames not traced",
	       median(t.guard) / 1e3, (median(t.guard) - base) / 1e3);
	printf("  %-38s %9.1f  (+%.1f, of which the process held %.1f)\n", "eacgm, the three frames traced",
	       median(t.traced) / 1e3, (median(t.traced) - base) / 1e3, median(t.held) / 1e3);
	printf("  in µs per throw\n");
}

uint64_t file_offset(const ElfFile &elf, const char *name)
{
	const ElfSymbol *s = elf.find(name);
	if (!s)
		die(elf.path() + " has no " + name);
	auto off = elf.vaddr_to_offset(s->addr);
	if (!off)
		die(off.error().message);
	return *off;
}

Bench setup(int argc, char **argv)
{
	Bench b;
	b.calls = argc > 1 ? atol(argv[1]) : b.calls;
	b.rounds = argc > 2 ? atoi(argv[2]) : b.rounds;
	if (b.calls < 32 || b.calls % 32 || b.rounds < 7)
		die("usage: bench_span_cost [calls per round, a multiple of 32, 20000] [rounds, at least 7]");
	auto elf = ElfFile::open(kLib);
	if (!elf)
		die(elf.error().message);
	b.noop = file_offset(*elf, "tl_noop");
	b.leaf = file_offset(*elf, "tl_leaf");
	b.cet = file_offset(*elf, "tl_cet");
	b.cet_probe = InsnDecoder().probe_offset(kLib, b.cet, elf->find("tl_cet")->size);
	if (b.cet_probe != b.cet + 4)
		die("eacgm would not probe tl_cet past its endbr64");
	b.floor = load_floor();
	b.bpftrace = find_on_path("bpftrace");
	return b;
}

} // namespace

int main(int argc, char **argv)
{
	try {
		auto t0 = Clock::now();
		Bench b = setup(argc, argv);
		print_machine();
		std::vector<Config> cs = make_configs(b);
		run_rounds(cs, b.rounds);
		print_table(b, cs);
		int rc = verdict(b, cs);
		print_exceptions(exception_rounds(b.throws, b.rounds), b);
		printf("(%.1f s)\n", std::chrono::duration<double>(Clock::now() - t0).count());
		return rc;
	} catch (const std::exception &e) {
		fprintf(stderr, "bench_span_cost: %s\n", e.what());
		return 1;
	}
}
