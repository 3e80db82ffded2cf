// SPDX-License-Identifier: Apache-2.0
#include "probe/span_engine.h"

#include <algorithm>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>

#include "common/fd.h"
#include "probe/links.h"
#include "probe/pid_watch.h"
#include "probe/guard_server.h"
#include "probe/unwind_guard.h"
#include <sys/syscall.h>
#include <unistd.h>

#include "span.skel.h"

namespace eacgm {

// BPF_TRACE_UPROBE_MULTI of the kernel's enum bpf_attach_type (6.6+); the
// system's UAPI headers (6.1) and libbpf 1.1 do not name it.

// An errno, or libbpf's negative one, made an error of its kind.
static Error bpf_error(int err, const std::string &what, const std::string &after = "")
{
	return errno_error(err < 0 ? -err : err, what, after);
}

// How often a CPU's span program asks how full the ring is (on every
// (mask + 1)th span; span.bpf.c): 32 spans, or fewer where 32 records
// would be more than an eighth of the ring (rings under 32 KiB), so that
// the reader is still woken well before a small ring fills.
uint32_t wakeup_check_mask(uint32_t ring_bytes)
{
	uint32_t every = 32;
	while (every > 1 && every * kSpanRingRecordBytes > ring_bytes / 8)
		every /= 2;
	return every - 1;
}

// One attempt at loading the programs: uprobe_multi ones or per-function
// ones, with the exception guard or without. Returns libbpf's error (0: loaded).
Result<int> SpanEngine::load(const Options &opts, int traced_map_fd, bool multi, bool guard)
{
	const uint32_t rb = opts.ring_buffer_bytes;
	skel_ = open_skeleton(span_bpf__open, span_bpf__destroy);
	if (!skel_)
		return errno_error(errno, "cannot open the span BPF object");
	skel_->rodata->trace_all = opts.trace_all;
	skel_->rodata->self_tgid = getpid();
	skel_->rodata->wakeup_bytes = rb / 4;
	skel_->rodata->wakeup_check_mask = wakeup_check_mask(rb);
	skel_->rodata->guard_on = guard;
	bpf_map__set_max_entries(skel_->maps.span_events, rb);
	int err = 0;
	if (traced_map_fd >= 0) {
		err = bpf_map__reuse_fd(skel_->maps.traced_tgids, traced_map_fd);
		if (err)
			return bpf_error(err, "cannot share the traced-process map");
	}
	if (opts.py_procs >= 0) {
		skel_->rodata->capture_py_stacks = true;
		std::pair<struct bpf_map *, int> shared[] = {{skel_->maps.py_procs, opts.py_procs},
							     {skel_->maps.py_tstates, opts.py_tstates},
							     {skel_->maps.py_events, opts.py_events},
							     {skel_->maps.py_counters, opts.py_counters}};
		for (auto [mine, theirs] : shared)
			if ((err = bpf_map__reuse_fd(mine, theirs)))
				return bpf_error(err, "cannot share the Python maps");
	} else {
		bpf_map__set_max_entries(skel_->maps.py_events, sysconf(_SC_PAGESIZE)); // unused
		bpf_map__set_max_entries(skel_->maps.py_code_cache, 1);
	}
	// One set or the other: each copy of the programs (with the Python
	// stack walker inlined) takes the verifier about 0.1 s, a third of
	// the start-up of a recording.
	struct bpf_program *multi_progs[] = {skel_->progs.span_entry_multi, skel_->progs.span_exit_multi,
					     skel_->progs.span_unwind_multi};
	struct bpf_program *single_progs[] = {skel_->progs.span_entry, skel_->progs.span_exit,
					      skel_->progs.span_unwind};
	for (auto *prog : multi_progs) {
		if (multi)
			bpf_program__set_expected_attach_type(prog, kTraceUprobeMulti);
		else
			bpf_program__set_autoload(prog, false);
	}
	for (auto *prog : single_progs)
		if (multi)
			bpf_program__set_autoload(prog, false);
	if (!guard)
		for (auto *prog : {skel_->progs.span_unwind, skel_->progs.span_unwind_multi})
			bpf_program__set_autoload(prog, false);
	return span_bpf__load(skel_.get());
}

Result<std::unique_ptr<SpanEngine>> SpanEngine::open(const Options &opts, int traced_map_fd)
{
	uint32_t rb = opts.ring_buffer_bytes;
	long page = sysconf(_SC_PAGESIZE);
	if (rb < (uint32_t)page || (rb & (rb - 1)))
		return make_error(ErrorKind::BadInput,
				  "ring buffer size " + std::to_string(rb) +
					  " bytes is not a power of two of at least " + std::to_string(page) +
					  "; use --ring-buffer-kb 4, 8, 16, ...");
	std::unique_ptr<SpanEngine> e(new SpanEngine());
	e->unguarded_ = opts.guard ? guard_refusal() : std::optional<std::string>("it was turned off");
	// First with the uprobe_multi programs; a kernel without them (< 6.6)
	// refuses the load, and the per-function programs serve alone.
	int err = 0;
	for (bool multi : {opts.multi_link, false}) {
		auto r = e->load(opts, traced_map_fd, multi, !e->unguarded_);
		if (!r)
			return r.error();
		err = r.value();
		e->multi_ = multi && !err;
		if (!err)
			break;
	}
	if (err)
		return bpf_error(err, "cannot load the span BPF programs",
				 " (run 'eacgm doctor' to check kernel support)");
	struct bpf_link *l = bpf_program__attach(e->skel_->progs.span_thread_exit);
	if (!l)
		return errno_error(errno, "cannot attach the thread-exit tracepoint");
	e->thread_exit_.add(l);
	if (!e->unguarded_) {
		auto g = GuardServer::start({e->skel_->maps.guard_requests, bpf_map__fd(e->skel_->maps.guards),
					     bpf_map__fd(e->skel_->maps.guard_done),
					     bpf_map__fd(e->skel_->maps.guard_stopped)});
		if (!g)
			return g.error();
		e->guard_server_ = std::move(g.value());
	}
	return e;
}

SpanEngine::~SpanEngine()
{
	{
		// Every library's links at once: one round of grace periods.
		LinkSet all;
		for (auto &g : groups_)
			all.absorb(std::move(g.links));
		all.absorb(std::move(thread_exit_));
	}
	// The guard after every return probe: a frame whose return went to the
	// trampoline while the probes were there keeps it until it returns, so
	// the guard stays as long as eacgm can keep it. Before the skeleton, a
	// member, goes.
	guard_links_.reset();
	guard_server_.reset(); // after its probes: what they asked is answered, what they stopped resumed
}

Result<void> SpanEngine::set_spec(uint32_t spec_id, const eacgm_probe_spec &spec)
{
	if (spec_id >= EACGM_MAX_SPECS)
		return make_error(ErrorKind::BadInput,
				  "too many probe specs (at most " + std::to_string(EACGM_MAX_SPECS) + ")");
	int err =
		bpf_map__update_elem(skel_->maps.probe_specs, &spec_id, sizeof(spec_id), &spec, sizeof(spec), BPF_ANY);
	if (err)
		return bpf_error(err, "cannot store probe spec");
	return {};
}

std::vector<SpanEngine::Target> SpanEngine::wanted(const Group &g, bool throttled) const
{
	std::vector<Target> out;
	for (auto &t : g.targets)
		if (throttled_.count(t.spec_id) == throttled)
			out.push_back(t);
	return out;
}

Result<void> SpanEngine::link(const std::string &path, const std::vector<Target> &targets, LinkSet &into)
{
	if (targets.empty())
		return {};
	for (bool ret : {false, true}) {
		auto r = multi_
			? attach_multi(ret ? skel_->progs.span_exit_multi : skel_->progs.span_entry_multi, path,
				       targets, ret, into)
			: attach_each(ret ? skel_->progs.span_exit : skel_->progs.span_entry, path, targets, ret, into);
		if (!r)
			return r;
	}
	return {};
}

// A perf-event uprobe link per target (kernels without uprobe_multi).
Result<void> SpanEngine::attach_each(struct bpf_program *prog, const std::string &path,
				     const std::vector<Target> &targets, bool ret, LinkSet &into)
{
	for (auto &t : targets) {
		LIBBPF_OPTS(bpf_uprobe_opts, o, .bpf_cookie = t.spec_id, .retprobe = ret);
		struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), t.file_offset, &o);
		if (!l)
			return errno_error(errno,
					   "cannot attach uprobe to " + path + " at offset " +
						   std::to_string(t.file_offset));
		into.add(l);
	}
	return {};
}

Result<void> SpanEngine::attach(const std::string &path, const std::vector<Target> &targets)
{
	if (targets.empty())
		return {};
	std::lock_guard<std::mutex> lock(mu_);
	Group g{path, targets, {}};
	if (auto r = link(path, wanted(g, false), g.links); !r)
		return r;
	groups_.push_back(std::move(g));
	return {};
}

Result<LinkSet> SpanEngine::attach_apart(const std::string &path, const std::vector<Target> &targets)
{
	LinkSet links;
	if (auto r = link(path, targets, links); !r)
		return r.error();
	return links;
}

Result<LinkSet> SpanEngine::set_throttled(const std::set<uint32_t> &specs)
{
	std::lock_guard<std::mutex> lock(mu_);
	std::set<uint32_t> before = std::exchange(throttled_, specs);
	LinkSet old;
	for (auto &g : groups_) {
		bool changed = false;
		for (auto &t : g.targets)
			changed |= before.count(t.spec_id) != specs.count(t.spec_id);
		if (!changed)
			continue;
		// The new links first, then the old ones go: no call is missed
		// between them (per-function links could be detached one by one,
		// but one rule for both is simpler and costs only the overlap).
		LinkSet fresh;
		if (auto r = link(g.path, wanted(g, false), fresh); !r) {
			throttled_ = before;
			return r.error();
		}
		old.absorb(std::exchange(g.links, std::move(fresh)));
	}
	return old;
}

Result<LinkSet> SpanEngine::attach_throttled()
{
	std::lock_guard<std::mutex> lock(mu_);
	LinkSet burst;
	for (auto &g : groups_)
		if (auto r = link(g.path, wanted(g, true), burst); !r)
			return r.error();
	return burst;
}

std::set<uint32_t> SpanEngine::throttled() const
{
	std::lock_guard<std::mutex> lock(mu_);
	return throttled_;
}

Result<void> SpanEngine::attach_multi(struct bpf_program *prog, const std::string &path,
				      const std::vector<Target> &targets, bool ret, LinkSet &into)
{
	std::vector<uint64_t> offsets, cookies;
	for (auto &t : targets) {
		offsets.push_back(t.file_offset);
		cookies.push_back(t.spec_id);
	}
	auto fd = attach_uprobe_multi(bpf_program__fd(prog), path, offsets, cookies, ret);
	if (!fd)
		return fd.error();
	into.add(std::move(fd.value()));
	return {};
}

Result<void> SpanEngine::attach_guard(const std::string &path, const std::vector<Target> &sites)
{
	if (!guarded() || sites.empty())
		return {};
	std::lock_guard<std::mutex> lock(mu_);
	return multi_ ? attach_multi(skel_->progs.span_unwind_multi, path, sites, false, guard_links_)
		      : attach_each(skel_->progs.span_unwind, path, sites, false, guard_links_);
}

size_t SpanEngine::threads_with_state() const
{
	return static_cast<size_t>(__atomic_load_n(&skel_->bss->threads_with_state, __ATOMIC_RELAXED));
}

Result<std::vector<eacgm_open_call>> SpanEngine::open_calls(uint32_t tid) const
{
	UniqueFd pidfd = thread_pidfd(tid);
	if (!pidfd) {
		if (errno == ESRCH)
			return std::vector<eacgm_open_call>{}; // gone: no calls in flight
		return errno_error(errno, "pidfd_open(" + std::to_string(tid) + ", PIDFD_THREAD)",
				   " (reading calls in flight needs Linux 6.9+)");
	}
	int key = pidfd.get();
	eacgm_thread_calls tc;
	if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.open_calls), &key, &tc) != 0) {
		if (errno == ENOENT)
			return std::vector<eacgm_open_call>{};
		return errno_error(errno, "reading a thread's open calls");
	}
	std::vector<eacgm_open_call> calls;
	for (uint32_t d = 0; d < std::min<uint32_t>(tc.depth, EACGM_MAX_DEPTH); d++)
		calls.push_back(tc.calls[d]);
	return calls;
}

struct bpf_map *SpanEngine::events_map() const { return skel_->maps.span_events; }

GuardCounts SpanEngine::guard_counts() const { return guard_server_ ? guard_server_->counts() : GuardCounts{}; }

std::array<uint64_t, EACGM_CNT_COUNT> SpanEngine::counters() const
{
	auto sums = sum_percpu_counters(skel_->maps.counters, EACGM_CNT_COUNT);
	std::array<uint64_t, EACGM_CNT_COUNT> total{};
	std::copy(sums.begin(), sums.end(), total.begin());
	return total;
}

} // namespace eacgm
