// SPDX-License-Identifier: Apache-2.0
#include "pipeline/python_spans.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

#include "common/layers.h"

namespace eacgm {

namespace {

bool same_function(const PyFrame &a, const PyFrame &b)
{
	return a.first_line == b.first_line && a.qualname == b.qualname && a.filename == b.filename;
}

// The frames a sample stands for, innermost first, given the open stack
// (outermost first, each with its .frame). A truncated sample lacks its
// outer frames: it continues the open stack where its outermost frame sits
// there (made in buf), or says nothing (null).
template <class OpenFrames>
const std::vector<PyFrame> *whole_stack(const PyStackSample &smp, const OpenFrames &open, std::vector<PyFrame> &buf)
{
	if (!smp.truncated)
		return &*smp.frames;
	if (smp.frames->empty())
		return nullptr;
	size_t at = open.size();
	for (size_t d = 0; d < open.size() && at == open.size(); d++)
		if (same_function(open[d].frame, smp.frames->back()))
			at = d;
	if (at == open.size())
		return nullptr;
	buf = *smp.frames;
	for (size_t d = at; d-- > 0;)
		buf.push_back(open[d].frame);
	return &buf;
}

// How many of the open frames, from the outermost, the stack still holds.
template <class OpenFrames>
size_t common_depth(const OpenFrames &open, const std::vector<PyFrame> &frames)
{
	size_t n = frames.size(), common = 0;
	while (common < open.size() && common < n && same_function(open[common].frame, frames[n - 1 - common]))
		common++;
	return common;
}

// The frames still open were seen by the sample: they last to it, and a
// periodic one counts its period for each. Returns that period (0: none).
template <class OpenFrames>
uint64_t credit(OpenFrames &open, const PyStackSample &smp)
{
	uint64_t weight_ns = smp.periodic ? smp.period_ns : 0;
	for (auto &o : open) {
		o.last = smp.ts_ns;
		o.samples += smp.periodic;
		o.sampled_ns += weight_ns;
	}
	return weight_ns;
}

struct Open {
	PyFrame frame;
	uint64_t start, last;
	size_t id;               // the span it becomes: sampled_spans()'s index order is by id
	size_t parent;           // id of the frame that called it, kNone at the bottom
	uint64_t samples = 0;    // periodic samples that saw it
	uint64_t sampled_ns = 0; // the sum of their periods
};

constexpr size_t kNone = SIZE_MAX;

// A function span with what the samples said of it: its frame, the frame
// below it and its depth in the stacks.
struct Sampled {
	Span span;
	PyFrame frame;
	size_t parent = kNone;
};

Span function_span(uint32_t pid, uint32_t tid, const PyFrame &f, uint64_t start, uint64_t end)
{
	Span s;
	s.pid = pid;
	s.tid = tid;
	s.layer = layer::python;
	s.name = f.qualname;
	s.start_ns = start;
	s.dur_ns = end - start;
	s.args = {{"file", f.filename}, {"line", f.first_line}};
	return s;
}

// Spans from samples: a function from the first sample that holds it to the
// last one that still does. A measured call's start or end between two
// samples closes its function's sampled frame (and those inside it) there,
// so back-to-back calls, and what they called, do not merge.
std::vector<Sampled> sampled_spans(uint32_t pid, uint32_t tid, const std::vector<PyStackSample> &samples,
				   const std::vector<PyCall> &calls)
{
	std::vector<std::pair<uint64_t, const PyFrame *>> bounds;
	for (const PyCall &c : calls) {
		bounds.emplace_back(c.start_ns, &c.frame);
		bounds.emplace_back(c.end_ns, &c.frame);
	}
	std::sort(bounds.begin(), bounds.end(), [](auto &a, auto &b) { return a.first < b.first; });
	size_t next_bound = 0;

	std::vector<Sampled> out; // by id, filled as frames close
	std::vector<Open> open;   // outermost first
	auto close_from = [&](size_t depth) {
		for (; open.size() > depth; open.pop_back()) {
			Open &o = open.back();
			out[o.id] = {function_span(pid, tid, o.frame, o.start, o.last), o.frame, o.parent};
			out[o.id].span.depth = open.size() - 1;
			out[o.id].span.args["samples"] = o.samples; // an estimate, not a call
			if (o.sampled_ns)
				out[o.id].span.args["sampled_ns"] = o.sampled_ns;
		}
	};
	for (const PyStackSample &smp : samples) {
		for (; next_bound < bounds.size() && bounds[next_bound].first <= smp.ts_ns; next_bound++)
			for (size_t d = open.size(); d-- > 0;)
				if (same_function(open[d].frame, *bounds[next_bound].second)) {
					close_from(d);
					break;
				}
		std::vector<PyFrame> whole;
		const std::vector<PyFrame> *frames = whole_stack(smp, open, whole);
		if (!frames)
			continue;
		size_t n = frames->size();
		size_t common = common_depth(open, *frames);
		close_from(common);
		uint64_t weight_ns = credit(open, smp);
		for (size_t d = common; d < n; d++) {
			open.push_back({(*frames)[n - 1 - d], smp.ts_ns, smp.ts_ns, out.size(),
					d ? open.back().id : kNone, smp.periodic, weight_ns});
			out.emplace_back();
		}
	}
	close_from(0);
	return out;
}

// Viewers' and the tests' order: by start, longer first, shallower first.
void sort_by_start(std::vector<Span> &out)
{
	std::sort(out.begin(), out.end(), [](const Span &a, const Span &b) {
		uint64_t ea = a.start_ns + a.dur_ns, eb = b.start_ns + b.dur_ns;
		if (a.start_ns != b.start_ns)
			return a.start_ns < b.start_ns;
		if (ea != eb)
			return ea > eb;
		return a.depth < b.depth; // as the samples nested them; unseen calls innermost
	});
}

} // namespace

// The stack is the nesting: a frame's span holds those opened above it while
// it was open, so its depth is its place on the stack and its self time its
// length less theirs (the batch's nesting by time finds the same).
void SampledSpans::close_from(size_t depth)
{
	for (; open_.size() > depth; open_.pop_back()) {
		Open &o = open_.back();
		size_t d = open_.size() - 1;
		Span s = function_span(pid_, tid_, o.frame, o.start, o.last);
		s.depth = static_cast<uint32_t>(d);
		s.args["samples"] = o.samples; // an estimate, not a call
		if (o.sampled_ns)
			s.args["sampled_ns"] = o.sampled_ns;
		s.args["self_ns"] = s.dur_ns - std::min(s.dur_ns, o.children_ns);
		if (d)
			open_[d - 1].children_ns += s.dur_ns;
		if (ended_.size() <= d)
			ended_.resize(d + 1, 0);
		ended_[d] = o.last;
		closed_.push_back(std::move(s));
	}
}

void SampledSpans::add(const PyStackSample &smp)
{
	if (smp.ts_ns < last_ns_)
		return add_late(smp);
	last_ns_ = smp.ts_ns;
	// The stack the open frames are, again (a torch call's two stacks, a
	// loop sampled in place): they only last longer. Its frames are not
	// compared: the same stack's frames are shared (SharedFrames).
	if (!smp.truncated && !smp.frames->empty() && &*smp.frames == &*top_) {
		credit(open_, smp);
		return;
	}
	std::vector<PyFrame> whole;
	const std::vector<PyFrame> *frames = whole_stack(smp, open_, whole);
	if (!frames)
		return;
	size_t n = frames->size();
	size_t common = common_depth(open_, *frames);
	close_from(common);
	uint64_t weight_ns = credit(open_, smp);
	for (size_t d = common; d < n; d++)
		open_.push_back({.frame = (*frames)[n - 1 - d],
				 .start = smp.ts_ns,
				 .last = smp.ts_ns,
				 .floor = d < ended_.size() ? ended_[d] : 0,
				 .samples = smp.periodic,
				 .sampled_ns = weight_ns});
	top_ = smp.truncated ? SharedFrames() : smp.frames;
}

// Where the open stack holds the late sample's outer frames, and their
// spans could have started at it (after the span before them at their
// depth, not before their caller), they start there; what is left of it has
// no span to go to.
void SampledSpans::add_late(const PyStackSample &smp)
{
	const std::vector<PyFrame> &f = *smp.frames;
	size_t n = smp.truncated ? 0 : f.size(), d = 0;
	for (; d < open_.size() && d < n; d++) {
		Open &o = open_[d];
		if (!same_function(o.frame, f[n - 1 - d]) || smp.ts_ns <= o.floor ||
		    (d && open_[d - 1].start > smp.ts_ns))
			break;
		o.start = std::min(o.start, smp.ts_ns);
	}
	if (d < f.size() || smp.truncated) {
		late_++;
		return;
	}
	for (size_t i = 0; i < d; i++) { // it saw them all: it counts
		open_[i].samples += smp.periodic;
		open_[i].sampled_ns += smp.periodic ? smp.period_ns : 0;
	}
}

std::vector<Span> SampledSpans::finish()
{
	close_from(0);
	top_ = SharedFrames();
	return take();
}

std::vector<Span> python_function_spans(uint32_t pid, uint32_t tid, const std::vector<PyStackSample> &samples,
					const std::vector<PyCall> &all_calls, size_t *dropped)
{
	// Samples are in time order: those during a call are a range. The
	// interpreter links a frame just after the eval loop's entry and unlinks
	// it just before its return, and a walk can meet a chain mid-update: one
	// sample is not enough, two are (a call paired with a later return
	// spans many).
	std::vector<PyCall> calls;
	for (const PyCall &c : all_calls) {
		auto it = std::upper_bound(samples.begin(), samples.end(), c.start_ns,
					   [](uint64_t t, const PyStackSample &s) { return t < s.ts_ns; });
		int against = 0;
		for (; it != samples.end() && it->ts_ns < c.end_ns && against < 2; ++it)
			against += !it->truncated &&
				std::none_of(it->frames->begin(), it->frames->end(),
					     [&](const PyFrame &f) { return same_function(f, c.frame); });
		bool contradicted = against >= 2;
		if (contradicted && dropped)
			++*dropped;
		if (!contradicted)
			calls.push_back(c);
	}

	if (calls.empty()) { // the samples alone: as they would come
		SampledSpans spans(pid, tid);
		for (const PyStackSample &smp : samples)
			spans.add(smp);
		auto out = spans.finish();
		sort_by_start(out);
		return out;
	}

	// Measured calls are the truth for their function: a sampled span of the
	// same function that overlaps any gives way to them (back-to-back calls
	// a sampler merged come apart; the ends become exact). What the samples
	// saw below it held those calls: it covers them.
	auto sampled = sampled_spans(pid, tid, samples, calls);
	std::vector<bool> replaced(sampled.size(), false);
	std::vector<uint32_t> call_depth(calls.size(), UINT32_MAX); // from the samples, where they saw it
	auto overlaps = [](const PyCall &c, uint64_t start, uint64_t end) {
		return c.start_ns <= end && c.end_ns >= start;
	};
	// The calls of each function, in start order. A function that calls
	// itself (importlib's _find_and_load does, one import inside another)
	// has calls and sampled spans at several levels of its own recursion: a
	// sampled span stands for the calls at its level.
	using Identity = std::tuple<std::string, std::string, int>;
	auto identity = [](const PyFrame &f) { return Identity{f.qualname, f.filename, f.first_line}; };
	std::map<Identity, std::vector<size_t>> calls_of;
	std::vector<size_t> call_level(calls.size(), 0), span_level(sampled.size(), 0);
	{
		std::vector<size_t> order(calls.size());
		for (size_t i = 0; i < order.size(); i++)
			order[i] = i;
		std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
			if (calls[a].start_ns != calls[b].start_ns)
				return calls[a].start_ns < calls[b].start_ns;
			return calls[a].end_ns > calls[b].end_ns;
		});
		std::map<Identity, std::vector<uint64_t>> open_ends; // per function
		for (size_t i : order) {
			Identity id = identity(calls[i].frame);
			auto &ends = open_ends[id];
			while (!ends.empty() && ends.back() <= calls[i].start_ns)
				ends.pop_back();
			call_level[i] = ends.size();
			ends.push_back(calls[i].end_ns);
			calls_of[id].push_back(i);
		}
	}
	for (size_t k = 0; k < sampled.size(); k++)
		for (size_t p = sampled[k].parent; p != kNone; p = sampled[p].parent)
			span_level[k] += same_function(sampled[p].frame, sampled[k].frame);
	// Extents as the samples gave them: what the covering rule asks.
	std::vector<std::pair<uint64_t, uint64_t>> sampled_extent;
	for (auto &x : sampled)
		sampled_extent.emplace_back(x.span.start_ns, x.span.start_ns + x.span.dur_ns);
	for (size_t k = 0; k < sampled.size(); k++) {
		auto same = calls_of.find(identity(sampled[k].frame));
		if (same == calls_of.end())
			continue;
		std::vector<size_t> mine;
		for (size_t i : same->second)
			if (call_level[i] == span_level[k] &&
			    overlaps(calls[i], sampled_extent[k].first, sampled_extent[k].second)) {
				mine.push_back(i);
				call_depth[i] = std::min(call_depth[i], sampled[k].span.depth);
			}
		replaced[k] = !mine.empty();
		// A caller the samples saw during part of a call was on the stack
		// for all of it. Only calls that overlap the caller's own sampled
		// extent say so (a sampled span can merge several calls far apart).
		for (size_t p = sampled[k].parent; p != kNone; p = sampled[p].parent)
			for (size_t i : mine) {
				Span &a = sampled[p].span;
				if (!overlaps(calls[i], sampled_extent[p].first, sampled_extent[p].second))
					continue;
				uint64_t end = std::max(a.start_ns + a.dur_ns, calls[i].end_ns);
				a.start_ns = std::min(a.start_ns, calls[i].start_ns);
				a.dur_ns = end - a.start_ns;
			}
	}
	std::vector<Span> out;
	for (size_t k = 0; k < sampled.size(); k++)
		if (!replaced[k])
			out.push_back(std::move(sampled[k].span));
	for (size_t i = 0; i < calls.size(); i++) {
		const PyCall &c = calls[i];
		out.push_back(function_span(pid, tid, c.frame, c.start_ns, std::max(c.end_ns, c.start_ns)));
		out.back().args[kExactArg] = true;
		out.back().depth = call_depth[i]; // orders ties below; set anew below
	}

	// Nesting by time. Measured calls nest among themselves; a sampled span
	// only knows its ends to a sample period, so where one disagrees with a
	// measured call it gives way: a sampled parent extends to cover a call
	// it contains, a sampled span that starts inside a call ends with it.
	sort_by_start(out);
	std::vector<size_t> stack; // indexes into out, outermost first
	std::vector<uint64_t> children(out.size(), 0);
	auto end_of = [&](size_t i) { return out[i].start_ns + out[i].dur_ns; };
	for (size_t i = 0; i < out.size(); i++) {
		Span &x = out[i];
		// Ended before x began; one that ends where x begins holds x only
		// if x ends there too (a one-sample span at its parent's last sample).
		while (!stack.empty() &&
		       (end_of(stack.back()) < x.start_ns || (end_of(stack.back()) == x.start_ns && x.dur_ns > 0)))
			stack.pop_back();
		if (!stack.empty() && x.start_ns + x.dur_ns > end_of(stack.back())) {
			if (x.args.contains(kExactArg)) {
				for (size_t a : stack) // ancestors ran at least as long as the call
					if (!out[a].args.contains(kExactArg) && end_of(a) < x.start_ns + x.dur_ns)
						out[a].dur_ns = x.start_ns + x.dur_ns - out[a].start_ns;
			}
			if (x.start_ns + x.dur_ns > end_of(stack.back()))
				x.dur_ns = end_of(stack.back()) - x.start_ns;
		}
		x.depth = stack.size();
		stack.push_back(i);
	}
	// Self time: not in a nested Python function (after the ends settled).
	stack.clear();
	for (size_t i = 0; i < out.size(); i++) {
		while (!stack.empty() && out[stack.back()].depth >= out[i].depth)
			stack.pop_back();
		if (!stack.empty())
			children[stack.back()] += out[i].dur_ns;
		stack.push_back(i);
	}
	for (size_t i = 0; i < out.size(); i++)
		out[i].args["self_ns"] = out[i].dur_ns - std::min(out[i].dur_ns, children[i]);
	return out;
}

std::vector<std::string> format_py_stack(const std::vector<PyFrame> &frames)
{
	std::vector<std::string> out;
	for (auto &f : frames) {
		if (f.filename.empty()) { // the "..." of a cut stack
			out.push_back(f.qualname);
			continue;
		}
		std::string file = f.filename.substr(f.filename.rfind('/') + 1);
		out.push_back(f.qualname + " (" + file + ":" + std::to_string(f.line) + ")");
	}
	return out;
}

} // namespace eacgm
