// Cost per traced call of a no-op library function, measured in one run:
//   untraced          the plain call
//   floor             an empty uprobe + uretprobe (the kernel's trap cost),
//                     on a function starting with "push %rbp" as real library
//                     functions do, and on one whose first instruction the
//                     kernel has to single-step
//   eacgm, filtered   the span engine on a process it does not trace
//   eacgm, traced     the span engine recording every call (one argument
//                     kept), with a consumer draining the ring buffer; with
//                     one uprobe_multi link and with per-function links
// Printed as ns/call and as the ratio to the floor. The trap dominates: what
// eacgm adds is the part above 1.00x.
#include <algorithm>
#include <atomic>
#include <bpf/libbpf.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>

#include "floor.skel.h"
#include "probe/elf_symbols.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"

#include "testlib.h"

using namespace eacgm;

static const std::string kLib = std::string(TESTPROGS_DIR) + "/libeacgm_testlib.so";

// Best of several rounds: the least disturbed by the rest of the machine.
static double ns_per_call(long calls, long (*fn)(long) = tl_noop, int rounds = 5)
{
	double best = 1e30;
	for (int r = 0; r < rounds; r++) {
		auto t0 = std::chrono::steady_clock::now();
		long acc = 0;
		for (long i = 0; i < calls; i++)
			acc += fn(i);
		auto t1 = std::chrono::steady_clock::now();
		if (acc == -1)
			puts("");
		best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);
	}
	return best;
}

static void die(const std::string &m)
{
	fprintf(stderr, "bench_span_cost: %s\n", m.c_str());
	exit(1);
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 20000;
	auto elf = ElfFile::open(kLib);
	if (!elf)
		die(elf.error().message);
	auto off = elf->vaddr_to_offset(elf->find("tl_noop")->addr);
	if (!off)
		die(off.error().message);

	double untraced = ns_per_call(calls * 100);

	// Empty probes on a function, measured calling it.
	auto floor_of = [&](const char *name, long (*fn)(long)) {
		auto o = elf->vaddr_to_offset(elf->find(name)->addr);
		floor_bpf *skel = floor_bpf__open_and_load();
		if (!o || !skel)
			die("cannot load the floor programs (root needed)");
		LIBBPF_OPTS(bpf_uprobe_opts, entry);
		LIBBPF_OPTS(bpf_uprobe_opts, exit_opts, .retprobe = true);
		bpf_link *a = bpf_program__attach_uprobe_opts(skel->progs.floor_entry, -1, kLib.c_str(), *o, &entry);
		bpf_link *b = bpf_program__attach_uprobe_opts(skel->progs.floor_exit, -1, kLib.c_str(), *o, &exit_opts);
		if (!a || !b)
			die("cannot attach the floor programs");
		double ns = ns_per_call(calls, fn);
		bpf_link__destroy(a);
		bpf_link__destroy(b);
		floor_bpf__destroy(skel);
		return ns;
	};
	double floor_ns = floor_of("tl_noop", tl_noop);
	// The kernel emulates a first "push %rbp" (tl_noop, and most functions of
	// real libraries) but must single-step other first instructions out of
	// line (tl_leaf): a second trap per call.
	double leaf_floor_ns = floor_of("tl_leaf", tl_leaf);

	// The span engine, with both kinds of link: what a traced call costs
	// must not depend on how the probes were attached.
	struct Engine {
		double filtered, traced;
		long received;
		uint64_t lost;
	};
	auto run_engine = [&](bool multi) {
		auto tracker = ProcTracker::open(false);
		if (!tracker)
			die(tracker.error().message);
		SpanEngine::Options o;
		o.multi_link = multi;
		auto engine = SpanEngine::open(o, (*tracker)->traced_map_fd());
		if (!engine)
			die(engine.error().message);
		eacgm_probe_spec spec{};
		spec.nargs = 1;
		spec.args[0] = {EACGM_ARG_ENTRY, 0, 0, 0};
		if (!(*engine)->set_spec(0, spec).ok() || !(*engine)->attach(kLib, {{*off, 0}}).ok())
			die("cannot attach the span engine");
		Engine r{};
		r.filtered = ns_per_call(calls);
		if (!(*tracker)->track(getpid()).ok())
			die("cannot track this process");
		std::atomic<bool> stop{false};
		std::atomic<long> received{0};
		auto cb = [](void *ctx, void *, size_t) {
			static_cast<std::atomic<long> *>(ctx)->fetch_add(1);
			return 0;
		};
		ring_buffer *rb = ring_buffer__new(bpf_map__fd((*engine)->events_map()), cb, &received, nullptr);
		std::thread consumer([&] {
			while (!stop)
				ring_buffer__poll(rb, 10);
			ring_buffer__consume(rb);
		});
		r.traced = ns_per_call(calls);
		stop = true;
		consumer.join();
		ring_buffer__free(rb);
		r.received = received.load();
		r.lost = (*engine)->counters()[EACGM_CNT_RINGBUF_FULL];
		return r;
	};
	Engine multi = run_engine(true), single = run_engine(false);

	printf("cost per call of a no-op library function (%ld calls, best of 5 rounds)\n", calls);
	printf("  %-24s %10s %10s\n", "", "ns/call", "vs floor");
	auto row = [&](const char *name, double ns) { printf("  %-24s %10.1f %9.2fx\n", name, ns, ns / floor_ns); };
	row("untraced", untraced);
	row("floor (empty probes)", floor_ns);
	row("  floor, single-stepped", leaf_floor_ns);
	row("eacgm, other process", multi.filtered);
	row("eacgm, traced", multi.traced);
	row("  per-function links", single.traced);
	printf("  eacgm added per traced call: %.1f ns above the floor\n", multi.traced - floor_ns);
	printf("  spans received %ld of %ld traced calls, lost %llu\n", multi.received + single.received,
	       2 * 5 * calls, (unsigned long long)(multi.lost + single.lost));
	return 0;
}
