// SPDX-License-Identifier: Apache-2.0
#include "pipeline/record_loop.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <poll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/layers.h"
#include "common/text.h"
#include "eacgm/abi/events.h"
#include "pipeline/cgroup.h"
#include "pipeline/decode.h"

namespace eacgm {

static constexpr size_t kBatch = 4096;

RecordLoop::RecordLoop(Probes &probes, System &system, RecordSource &source, Sink &out, PythonTracer *python)
	: probes_(probes), system_(system), source_(source), out_(out), processes_(probes, system, python),
	  python_(python), python_join_(python, processes_.table(), system)
{}

void RecordLoop::open() { issues_.emplace(probes_.specs().probes); }

void RecordLoop::span(const eacgm_span_event &e)
{
	const auto &specs = probes_.specs();
	if (e.spec_id == EACGM_SPEC_EXCEPTION_TYPE) {
		pending_.push_back(e); // named in order: after this round's exec, before the spans it leaves
		return;
	}
	if (e.spec_id >= specs.probes.size())
		return;
	if (processes_.excluded(e.tgid)) {
		filtered_++;
		return;
	}
	processes_.call_seen(e);
	// Decoded at flush, after this round's process events: a forked child's
	// spans can be read before the fork record that says whose maps it has.
	pending_.push_back(e);
	spans_seen_++;
	if (e.spec_id >= spans_per_spec_.size())
		spans_per_spec_.resize(specs.probes.size());
	spans_per_spec_[e.spec_id]++;
	if (e.tid != last_caller_) {
		last_caller_ = e.tid;
		calling_.emplace(e.tid, e.tgid);
	}
}

void RecordLoop::py(const eacgm_py_stack_event &e, uint32_t n) { python_join_.record(e, n); }

std::vector<std::string> RecordLoop::take_warnings()
{
	for (auto &w : processes_.take_warnings())
		warnings_.add(w);
	return warnings_.take();
}

Result<int> RecordLoop::poll(int timeout_ms)
{
	// The BPF side wakes us only when a buffer fills up (a wakeup per record
	// would cost more than the probe), so read whatever is there after each
	// wait. A traced process's exit wakes us too (its pidfd).
	pollfd fds[2] = {{source_.fd(), POLLIN, 0}, {system_.exits_fd(), POLLIN, 0}};
	if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR)
		return errno_error(errno, "waiting for events failed");
	auto n = read_round();
	if (!n)
		return n.error();
	processes_.settle(false);
	if (auto r = processes_.announce(out_); !r)
		return r.error();
	uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	if (auto r = flush(); !r)
		return r.error();
	handling_cpu_ns_ += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
	if (auto r = processes_.retire(out_); !r)
		return r.error();
	processes_.sweep();
	// Once a second, whatever came: serve's loss counts as they stand
	// (record's are written once, at the end), then the sinks' tick.
	if (uint64_t now = system_.now_ns(); now - last_tick_ns_ >= kTickNs) {
		last_tick_ns_ = now;
		if (processes_.discovering())
			if (auto r = out_.drops(drops()); !r)
				return r.error();
		if (auto r = out_.tick(now); !r)
			return r.error();
	}
	return *n;
}

// One read of the source. Its callbacks only copy; then the round's process
// records are handled in their order, its threads named and the Python
// stacks behind its calls named, before any span of it is decoded (flush).
// The records' reading and the stacks' naming count as the budget's cost of
// a record; the process handling does not (nor looking for processes).
Result<int> RecordLoop::read_round()
{
	uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	auto n = source_.consume(*this);
	if (!n)
		return n.error();
	records_read_ += static_cast<uint64_t>(*n);
	handling_cpu_ns_ += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
	processes_.after_read();
	for (uint32_t pid : processes_.take_images_gone())
		python_join_.forget(pid);
	cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	python_join_.name_call_stacks();
	handling_cpu_ns_ += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
	return n;
}

Result<void> RecordLoop::drain()
{
	if (auto n = read_round(); !n)
		return n.error();
	processes_.settle(true);
	return flush(true);
}

// What decode needs of a probe. Its calls may stay typed where no joiner
// changes or holds them (the NCCL layer's communicators, the issue linker,
// the Python layer's entries), so that their Spans are made only where a
// sink reads Spans, and the store keeps them without one.
const RecordLoop::ProbeFacts &RecordLoop::facts(uint32_t spec_id)
{
	const auto &specs = probes_.specs();
	for (size_t i = probe_facts_.size(); i < specs.probes.size(); i++) {
		const ProbeSpec &p = specs.probes[i];
		const Joiner j = joiner_of(p.layer);
		probe_facts_.push_back({decode_plan(p), j, j == Joiner::none && !(issues_ && issues_->involves(p))});
	}
	return probe_facts_[spec_id];
}

// One span record: typed to the batch where no joiner needs it (most
// calls), else as a Span through the joiners.
void RecordLoop::decode(const eacgm_span_event &e)
{
	if (e.spec_id == EACGM_SPEC_EXCEPTION_TYPE) {
		name_exception_type(e, processes_.symbolizer());
		return;
	}
	const auto &specs = probes_.specs();
	const ProbeSpec &spec = specs.probes[e.spec_id];
	if (raw_dump_)
		raw_dump_->span(e);
	const ProbeFacts &f = facts(e.spec_id);
	TypedSpan t = decode_typed(e, spec, f.plan, specs, &processes_.symbolizer(), names_);
	// A call seen in a burst of a throttled probe stands for those its
	// probe was detached for (--overhead-budget).
	t.weight = budget_.weight(e.spec_id, e.start_ns);
	if (f.typed) {
		typed_.specs = &specs, typed_.names = &names_, typed_.tensors = tensors_;
		typed_.push_back(t, python_join_.take_stack(e));
		return;
	}
	decoded_.push_back(render_span(t, spec, specs, names_, tensors_));
	Span &s = decoded_.back();
	switch (f.joiner) {
	case Joiner::none: break; // held for the issue linker alone
	case Joiner::nccl_communicators: nccl_.observe(s); break;
	case Joiner::python_functions:
		if (python_ && s.name == kEvalEntryFunction) {
			python_join_.eval_entry(s, e);
			decoded_.pop_back(); // it lives on as a Python function span
			return;
		}
		break;
	}
	s.py_stack = python_join_.take_stack(e);
	// Held by the linker until the call that issued its work is read.
	if (issues_ && !issues_->see(s, spec.issues))
		decoded_.pop_back();
}

Result<void> RecordLoop::flush(bool force)
{
	const bool serve = processes_.discovering();
	const uint64_t now_ns = serve && !pending_.empty() ? system_.now_ns() : 0;
	{
		for (size_t k = 0; k < pending_.size(); k++) {
			const eacgm_span_event &e = pending_[k];
			if (serve && processes_.excluded(e.tgid)) {
				filtered_++; // read before its process was judged
				continue;
			}
			if (serve && processes_.awaits_verdict(e, force, now_ns)) {
				held_spans_.push_back(e);
				continue;
			}
			decode(e);
		}
	}
	pending_.swap(held_spans_); // next round's, first
	held_spans_.clear();
	// Decoding and Python names cannot wait (the process may exit); the
	// store can: a transaction per wakeup would cost more than the tracing.
	auto now = std::chrono::steady_clock::now();
	if (force || decoded_.size() + typed_.size() >= kBatch || now - last_store_ > std::chrono::milliseconds(200)) {
		last_store_ = now;
		if (issues_)
			issues_->release(decoded_, system_.now_ns(), force);
		SpanBatch batch{SpanBatch::calls, std::move(decoded_), {}, std::move(typed_)};
		auto r = out_.write(batch);
		decoded_ = std::move(batch.spans); // its capacity, for the next batch
		decoded_.clear();
		typed_ = std::move(batch.typed);
		typed_.clear();
		if (!r)
			return r;
	}
	return python_join_.flush(out_, budget_, force);
}

Result<void> RecordLoop::finish()
{
	if (auto r = drain(); !r)
		return r;
	// The Python spans first: their threads are noted as they are made.
	if (auto r = python_join_.finish(out_); !r)
		return r;
	if (auto r = processes_.table().finish(out_); !r)
		return r;
	if (raw_dump_)
		if (auto r = raw_dump_->close(probes_.specs()); !r)
			return r;
	if (auto r = out_.drops(drops()); !r)
		return r;
	return out_.finish(); // the last call a sink gets
}

std::vector<Drop> RecordLoop::drops() const
{
	auto c = probes_.counters();
	std::vector<Drop> drops = {
		{"uprobe", "ring_buffer_full", c[EACGM_CNT_RINGBUF_FULL]},
		{"uprobe", "depth_overflow", c[EACGM_CNT_DEPTH_OVERFLOW]},
		{"uprobe", "unpaired_entry", c[EACGM_CNT_UNPAIRED]},
		{"uprobe", "thread_table_full", c[EACGM_CNT_NO_STATE]},
		{"uprobe", "exited_in_call", c[EACGM_CNT_EXITED_IN_CALL]},
	};
	if (python_) {
		auto p = python_->counters();
		drops.push_back({layer::python, "ring_buffer_full", p[EACGM_PY_CNT_RINGBUF_FULL]});
		drops.push_back({layer::python, "unreadable_stack", p[EACGM_PY_CNT_READ_FAILED]});
		python_join_.drops(drops);
	}
	return drops;
}

} // namespace eacgm
