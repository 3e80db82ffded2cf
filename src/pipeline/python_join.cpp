// SPDX-License-Identifier: Apache-2.0
#include "pipeline/python_join.h"

#include <algorithm>
#include <cstring>

#include "common/layers.h"

namespace eacgm {

// Samples come out of order by up to the length of a traced call (a torch
// call's start is read when it returns) and the read's latency; those older
// than this go in in time order (a later one still comes in: SampledSpans
// places it where it can).
static constexpr uint64_t kPyReorderNs = 2'000'000'000;

void PythonJoiner::record(const eacgm_py_stack_event &e, uint32_t n)
{
	if (e.kind == EACGM_PY_SPAN) {
		call_stacks_.push_back({e.id, e.tgid, e.flags, uint32_t(call_frames_.size()), n});
		call_frames_.insert(call_frames_.end(), e.frames, e.frames + n);
		return;
	}
	samples_read_++;
	pending_samples_.push_back(
		{e.ts_ns, e.tgid, e.tid, e.flags, std::vector<eacgm_py_frame>(e.frames, e.frames + n)});
}

void PythonJoiner::name_call_stacks()
{
	for (const CallStack &c : call_stacks_)
		span_stacks_[c.id] = {c.flags, resolved(c.pid, call_frames_.data() + c.first, c.n, true)};
	call_stacks_.clear();
	call_frames_.clear();
}

PyStack PythonJoiner::peek_stack(uint64_t id) const
{
	auto st = id ? span_stacks_.find(id) : span_stacks_.end();
	if (st == span_stacks_.end() || !st->second.stack.frames || (*st->second.stack.frames)->empty())
		return {};
	return st->second.stack.shown;
}

Result<void> PythonJoiner::flush(Sink &out, const BudgetHistory &budget, bool force)
{
	for (auto &raw : pending_samples_) {
		ResolvedStack &rs = resolved(raw.pid, raw.frames.data(), raw.frames.size(), false);
		if (!rs.frames || (*rs.frames)->empty())
			continue;
		rs.samples += fold_;
		add_sample(raw.pid, raw.tid,
			   {raw.ts, *rs.frames, (raw.flags & EACGM_PY_TRUNCATED) != 0, true, budget.period_at(raw.ts)});
	}
	pending_samples_.clear();
	retire_stack_cache();
	auto now = std::chrono::steady_clock::now();
	if (stream_ && (force || now - last_fold_ > std::chrono::seconds(1))) {
		last_fold_ = now;
		return fold(out, false);
	}
	return {};
}

void PythonJoiner::drops(std::vector<Drop> &out) const
{
	out.push_back({layer::python, "unresolved_stack", unresolved_});
	out.push_back({layer::python, "unresolved_entry", entries_lost_});
	out.push_back({layer::python, "contradicted_call", calls_contradicted_});
	out.push_back({layer::python, "late_sample", late_});
}

// The cache holds while the resolver trusts what it resolved: past that a
// code object at the same address may be another, and is looked at anew.
void PythonJoiner::retire_stack_cache()
{
	uint64_t now = system_.now_ns();
	if (now - stack_cache_since_ns_ < PythonResolver::kTrustNs && stack_cache_.size() < 65536)
		return;
	fold_cached_samples();
	stack_cache_.clear();
	cached_stacks_.clear();
	stack_cache_since_ns_ = now;
}

// The key of a cached stack starts with its process's pid.
static uint32_t cached_pid(const std::string &key)
{
	uint32_t pid;
	memcpy(&pid, key.data(), sizeof pid);
	return pid;
}

void PythonJoiner::fold_cached_samples()
{
	for (auto &[key, rs] : stack_cache_)
		fold_cached(cached_pid(key), rs);
}

void PythonJoiner::fold_cached(uint32_t pid, ResolvedStack &rs)
{
	if (!rs.samples)
		return;
	// Known: a stack resolves only for a process watched as Python.
	const Process *p = table_.find(pid);
	std::string line = p ? p->comm : "";
	for (auto f = (*rs.frames)->rbegin(); f != (*rs.frames)->rend(); ++f)
		line += ";" + f->qualname + " (" + f->filename.substr(f->filename.rfind('/') + 1) + ":" +
			std::to_string(f->first_line) + ")";
	folded_[line] += std::exchange(rs.samples, 0);
}

void PythonJoiner::forget(uint32_t pid)
{
	resolver_.forget(pid);
	auto cached = cached_stacks_.find(pid);
	if (cached == cached_stacks_.end())
		return;
	cached_stacks_.erase(cached);
	for (auto it = stack_cache_.begin(); it != stack_cache_.end();) {
		if (cached_pid(it->first) != pid) {
			++it;
			continue;
		}
		fold_cached(pid, it->second);
		it = stack_cache_.erase(it);
	}
}

PythonJoiner::ResolvedStack &PythonJoiner::resolved(uint32_t pid, const eacgm_py_frame *frames, uint32_t n,
						    bool partial)
{
	// The key is built in a buffer kept between calls and looked up as a
	// view: a hit, which nearly every walk is, allocates nothing.
	std::string &key = stack_key_;
	key.resize(sizeof pid + 1 + n * sizeof *frames);
	memcpy(key.data(), &pid, sizeof pid);
	key[sizeof pid] = partial;
	memcpy(key.data() + sizeof pid + 1, frames, n * sizeof *frames);
	auto it = stack_cache_.find(std::string_view(key));
	if (it == stack_cache_.end()) {
		it = stack_cache_.emplace(key, ResolvedStack{}).first;
		cached_stacks_.insert(pid);
		auto f = resolve_stack(pid, frames, n, partial);
		if (f) {
			// Only a call's stack is shown (a sample's makes function
			// spans): formatting every sampled walk was a tenth of
			// eacgm's CPU on a GPT step.
			if (partial)
				it->second.shown = PyStack(format_py_stack(*f));
			it->second.frames = SharedFrames(std::move(*f));
		}
	}
	// Counted per record, cached or not: a sample, or a call's stack, whose
	// code was gone before it was read.
	if (!it->second.frames)
		unresolved_++;
	return it->second;
}

std::optional<std::vector<PyFrame>> PythonJoiner::resolve_stack(uint32_t pid, const eacgm_py_frame *frames, uint32_t n,
								bool partial)
{
	if (!tracer_)
		return std::nullopt;
	auto proc = tracer_->processes().find(pid);
	if (proc == tracer_->processes().end())
		return std::nullopt;
	const PyOffsets *o = &proc->second.offsets;
	std::vector<PyFrame> out;
	for (uint32_t i = 0; i < n; i++) {
		auto f = resolver_.resolve(pid, *o, frames[i].code, frames[i].instr, frames[i].name, frames[i].file);
		if (!f) {
			// Past a module's top-level code there is no more Python: a
			// frame there is a stale link (seen on 3.11's outermost entry
			// frame), cut off. Anywhere else the stack is dropped, counted:
			// mostly code objects freed before we looked (a module body once
			// its import is done), and a stack with a hole would put time in
			// the wrong function.
			if (!out.empty() && out.back().qualname == "<module>")
				return out;
			// The stack behind a call may show its inner frames, marked cut.
			if (partial && !out.empty()) {
				out.push_back({"...", "", 0, 0});
				return out;
			}
			return std::nullopt;
		}
		out.push_back({std::move(f->qualname), std::move(f->filename), f->line, f->first_line});
	}
	return out;
}

void PythonJoiner::eval_entry(const Span &s, const eacgm_span_event &e)
{
	std::optional<PyFrameInfo> f;
	if (tracer_)
		if (auto proc = tracer_->processes().find(s.pid); proc != tracer_->processes().end())
			// The function entered, from the frame it was given (args: code, code_name).
			f = resolver_.resolve(s.pid, proc->second.offsets, e.args[0], 0, e.args[1]);
	if (!f) {
		entries_lost_++;
		return;
	}
	calls_[{s.pid, s.tid}].push_back(
		{s.start_ns, s.start_ns + s.dur_ns, {f->qualname, f->filename, f->first_line, f->first_line}});
}

// The Python stack a call was made under (its record's py_stack), shown
// with it; the functions of that stack join the samples at its start and
// end. Empty: none, or a thread without Python frames.
PyStack PythonJoiner::take_stack(const eacgm_span_event &e)
{
	auto stack = e.py_stack ? span_stacks_.find(e.py_stack) : span_stacks_.end();
	if (stack == span_stacks_.end())
		return {};
	PyStack shown;
	auto &[flags, rs] = stack->second;
	// A thread started from C (a torch autograd or CUDA worker,
	// _thread.start_new_thread of a C function) has a thread state but no
	// Python frames: its call has no stack.
	if (rs.frames && !(*rs.frames)->empty()) {
		const SharedFrames &frames = *rs.frames;
		shown = rs.shown;
		// The functions that made the call contain it: they join the
		// samples at its start and end (a cut or truncated stack would
		// mislead them: it stays out).
		if (frames->back().qualname != "..." && !(flags & EACGM_PY_TRUNCATED)) {
			add_sample(e.tgid, e.tid, {e.start_ns, frames, false, false});
			add_sample(e.tgid, e.tid, {e.start_ns + e.dur_ns, frames, false, false});
		}
	}
	// A call that shared the record of the call it nests in (the same
	// Python frame made both) ends first: the owner's span takes it last.
	if (!(e.flags & EACGM_SPAN_PY_SHARED))
		span_stacks_.erase(stack);
	return shown;
}

void PythonJoiner::add_sample(uint32_t pid, uint32_t tid, PyStackSample smp)
{
	if (!stream_) {
		samples_[{pid, tid}].push_back(std::move(smp));
		return;
	}
	auto [it, fresh] = threads_.try_emplace({pid, tid}, PyThread{{}, SampledSpans(pid, tid)});
	if (fresh)
		table_.note_thread(pid, tid, smp.ts_ns);
	it->second.pending.push_back(std::move(smp));
}

Result<void> PythonJoiner::fold(Sink &out, bool all)
{
	uint64_t before = all ? UINT64_MAX : system_.now_ns() - kPyReorderNs;
	auto by_time = [](const PyStackSample &a, const PyStackSample &b) { return a.ts_ns < b.ts_ns; };
	std::vector<Span> spans;
	for (auto it = threads_.begin(); it != threads_.end();) {
		PyThread &t = it->second;
		std::stable_sort(t.pending.begin(), t.pending.end(), by_time);
		auto end = std::upper_bound(t.pending.begin(), t.pending.end(), before,
					    [](uint64_t ts, const PyStackSample &s) { return ts < s.ts_ns; });
		for (auto p = t.pending.begin(); p != end; ++p)
			t.spans.add(*p);
		t.pending.erase(t.pending.begin(), end);
		// A thread of a process that has exited, with nothing left to
		// place, is done: its state goes (a node agent sees thousands of
		// short-lived threads come and go).
		bool done = all || (t.pending.empty() && !table_.live(it->first.first));
		for (Span &s : done ? t.spans.finish() : t.spans.take())
			spans.push_back(std::move(s));
		if (!done) {
			++it;
			continue;
		}
		late_ += t.spans.late();
		it = threads_.erase(it);
	}
	SpanBatch batch{SpanBatch::sampled, std::move(spans), {}};
	return out.write(batch);
}

// Python function spans: the rest of those made as the samples came, or
// all of them, from each thread's samples in time order.
Result<void> PythonJoiner::finish(Sink &out)
{
	if (stream_)
		return fold(out, true);
	for (auto &[key, calls] : calls_)
		samples_[key]; // a thread with calls and no samples
	for (auto &[key, samples] : samples_) {
		std::stable_sort(samples.begin(), samples.end(),
				 [](const PyStackSample &a, const PyStackSample &b) { return a.ts_ns < b.ts_ns; });
		table_.note_thread(key.first, key.second, samples.empty() ? 0 : samples.front().ts_ns);
		auto calls = calls_.find(key);
		SpanBatch batch{SpanBatch::sampled,
				python_function_spans(key.first, key.second, samples,
						      calls == calls_.end() ? std::vector<PyCall>{} : calls->second,
						      &calls_contradicted_),
				{}};
		if (auto r = out.write(batch); !r)
			return r;
	}
	return {};
}

std::string PythonJoiner::folded_stacks()
{
	fold_cached_samples();
	std::string out;
	for (auto &[stack, n] : folded_)
		out += stack + " " + std::to_string(n) + "\n";
	return out;
}

} // namespace eacgm
