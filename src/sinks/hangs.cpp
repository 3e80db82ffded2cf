// SPDX-License-Identifier: Apache-2.0
#include "sinks/hangs.h"

#include <algorithm>
#include <cstdio>

#include "common/text.h"
#include "pipeline/collectives.h"

namespace eacgm {

Result<void> HangWatch::write(SpanBatch &b)
{
	for (const Span &s : b.spans)
		if (auto c = collective_of(s))
			completed(*c);
	for (size_t i = 0; i < b.typed.size(); i++)
		if (auto c = typed_.of(b.typed, i))
			completed(*c);
	return {};
}

void HangWatch::completed(const CollectiveSpan &c)
{
	Group g{c.key.layer, c.key.nranks};
	int64_t &last = completed_[g][c.arrival.rank];
	last = std::max(last, int64_t(c.key.seq));
	pid_rank_[c.arrival.pid] = {g, c.arrival.rank};
}

Result<void> HangWatch::process(const Process &p)
{
	if (p.end_ns)
		pid_rank_.erase(p.pid);
	return {};
}

uint64_t HangWatch::interval_ns() const { return std::clamp<uint64_t>(after_ns_ / 4, 100'000'000, 1'000'000'000); }

void HangWatch::collect(uint64_t now_ns, const std::set<uint32_t> &, std::vector<Metric> &, std::vector<Event> &events)
{
	if (!loop_ || now_ns < due_ns_)
		return;
	due_ns_ = now_ns + interval_ns();
	check(now_ns, loop_->open_spans(now_ns, true), events);
}

void HangWatch::check(uint64_t now_ns, const std::vector<RecordLoop::OpenSpan> &open, std::vector<Event> &events)
{
	// Who is inside which collective now, and the Python stack of each
	// process's outermost wait (the line that issued what it waits for:
	// a collective runs on a worker thread, with no Python of its own).
	Progress entered;
	std::map<uint32_t, PyStack> waiting_stack;
	std::set<uint32_t> hung_collective; // processes with a collective past the limit
	std::vector<std::optional<CollectiveSpan>> colls;
	for (const auto &o : open) {
		const Span &s = o.span;
		colls.push_back(collective_of(s));
		if (const auto &c = colls.back()) {
			int64_t &last = entered[{c->key.layer, c->key.nranks}][c->arrival.rank];
			last = std::max(last, int64_t(c->key.seq));
			if (s.dur_ns >= after_ns_)
				hung_collective.insert(s.pid);
		}
		if (!s.py_stack.empty() && !waiting_stack.count(s.pid))
			waiting_stack[s.pid] = s.py_stack;
	}
	for (size_t i = 0; i < open.size(); i++) {
		const Span &s = open[i].span;
		if (!open[i].waits || s.dur_ns < after_ns_ || reported_.count({s.pid, s.tid, s.start_ns}))
			continue;
		// A wait on a collective seen hung is told by the collective's report.
		if (!colls[i] && hung_collective.count(s.pid))
			continue;
		auto ws = waiting_stack.find(s.pid);
		report(now_ns, s, colls[i], entered, ws == waiting_stack.end() ? PyStack() : ws->second, events);
	}
	report_over(now_ns, open, events);
}

// "8.0": seconds, to a tenth.
static std::string tenths_of_seconds(uint64_t ns)
{
	char text[32];
	std::snprintf(text, sizeof text, "%.1f", double(ns) / 1e9);
	return text;
}

// "train.py:42 main <- ..." innermost first, at most three frames.
static std::string short_stack(const PyStack &st)
{
	std::vector<std::string> frames;
	for (size_t i = 0; i < st.size() && i < 3; i++)
		frames.push_back(st[i]);
	return join(frames, " <- ") + (st.size() > 3 ? " <- ..." : "");
}

static std::string ranks_text(const std::vector<int64_t> &ranks)
{
	std::vector<std::string> v;
	for (int64_t r : ranks)
		v.push_back(std::to_string(r));
	return "[" + join(v, ", ") + "]";
}

std::pair<std::vector<int64_t>, std::vector<int64_t>>
HangWatch::ranks_behind(const Group &group, int64_t rank, int64_t seq, const Progress &entered) const
{
	std::vector<int64_t> missing, unseen;
	for (int64_t r = 0; r < group.second; r++) {
		if (r == rank)
			continue;
		int64_t last = -1;
		bool seen = false;
		for (const Progress *p : {&completed_, &entered})
			if (auto g = p->find(group); g != p->end())
				if (auto it = g->second.find(r); it != g->second.end())
					last = std::max(last, it->second), seen = true;
		if (!seen)
			unseen.push_back(r);
		else if (last < seq)
			missing.push_back(r);
	}
	return {missing, unseen};
}

void HangWatch::report(uint64_t now_ns, const Span &s, const std::optional<CollectiveSpan> &c, const Progress &entered,
		       const PyStack &waiting_stack, std::vector<Event> &events)
{
	Event e{now_ns, s.layer, "hang", s.name, s.pid, s.tid, nlohmann::json::object()};
	e.args["call"] = s.name;
	e.args["start_ns"] = s.start_ns;
	e.args["age_s"] = double(s.dur_ns) / 1e9;
	std::string line = s.layer + " " + s.name + " in flight for " + tenths_of_seconds(s.dur_ns) + " s: pid " +
		std::to_string(s.pid) + " tid " + std::to_string(s.tid);
	for (const char *k : {"rank", "nranks", "seq"})
		if (auto v = int_arg(s, k); v && *v >= 0)
			e.args[k] = *v;
	// A wait without a rank of its own: its process's, from its collectives.
	int64_t rank = int_arg(s, "rank").value_or(-1);
	Group group{s.layer, int_arg(s, "nranks").value_or(-1)};
	if (auto pr = pid_rank_.find(s.pid); rank < 0 && pr != pid_rank_.end()) {
		std::tie(group, rank) = pr->second;
		e.args["rank"] = rank;
		e.args["nranks"] = group.second;
	}
	if (rank >= 0)
		line += ", rank " + std::to_string(rank) + " of " + std::to_string(group.second);
	if (c) {
		auto [missing, unseen] = ranks_behind(group, rank, int64_t(c->key.seq), entered);
		e.args["missing_ranks"] = missing;
		e.args["ranks_not_seen"] = unseen;
		line += ", seq " + std::to_string(c->key.seq) + ", missing_ranks " + ranks_text(missing);
		if (!unseen.empty())
			line += " (ranks " + ranks_text(unseen) + " not in this recording)";
	}
	const PyStack &stack = s.py_stack.empty() ? waiting_stack : s.py_stack;
	e.args["python_stack"] = stack;
	if (!stack.empty())
		line += "; python: " + short_stack(stack);
	lines_.push_back(line);
	events.push_back(std::move(e));
	reported_[{s.pid, s.tid, s.start_ns}] = s;
}

void HangWatch::report_over(uint64_t now_ns, const std::vector<RecordLoop::OpenSpan> &open, std::vector<Event> &events)
{
	std::set<CallKey> still;
	for (const auto &o : open)
		still.insert({o.span.pid, o.span.tid, o.span.start_ns});
	for (auto it = reported_.begin(); it != reported_.end();) {
		if (still.count(it->first)) {
			++it;
			continue;
		}
		const Span &s = it->second;
		Event e{now_ns, s.layer, "hang_over", s.name, s.pid, s.tid, nlohmann::json::object()};
		e.args["call"] = s.name;
		e.args["start_ns"] = s.start_ns;
		lines_.push_back(s.layer + " " + s.name + " (pid " + std::to_string(s.pid) + " tid " +
				 std::to_string(s.tid) + ") is no longer in flight, after about " +
				 tenths_of_seconds(now_ns - s.start_ns) + " s");
		events.push_back(std::move(e));
		it = reported_.erase(it);
	}
}

} // namespace eacgm
