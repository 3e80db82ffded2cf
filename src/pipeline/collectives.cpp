// SPDX-License-Identifier: Apache-2.0
#include "pipeline/collectives.h"

#include <algorithm>
#include <tuple>

namespace eacgm {

std::optional<int64_t> int_arg(const Span &s, const char *name)
{
	auto it = s.args.find(name);
	if (it == s.args.end() || !it->is_number_integer())
		return std::nullopt;
	return it->get<int64_t>();
}

void sort_rounds(std::vector<Round> &rounds)
{
	std::stable_sort(rounds.begin(), rounds.end(), [](const Round &a, const Round &b) {
		return std::tie(a.arrivals.front().start_ns, a.key) < std::tie(b.arrivals.front().start_ns, b.key);
	});
}

namespace {

// A call's place in a round from its three integers, for Spans and typed
// spans alike.
std::optional<CollectiveSpan> collective(const std::string &layer, const std::string &name, uint32_t pid, uint32_t tid,
					 uint64_t start_ns, uint64_t dur_ns, std::optional<int64_t> rank,
					 std::optional<int64_t> nranks, std::optional<int64_t> seq)
{
	// A rank not yet known is read as -1 (the nccl layer's before its
	// communicator's init): not a place in a round.
	if (!rank || !nranks || !seq || *nranks < 2 || *nranks > UINT32_MAX || *rank < 0 || *rank >= *nranks ||
	    *seq < 0)
		return std::nullopt;
	return CollectiveSpan{
		.key = {.layer = layer,
			.nranks = static_cast<uint32_t>(*nranks),
			.seq = static_cast<uint64_t>(*seq),
			.name = name},
		.arrival = {.rank = static_cast<uint32_t>(*rank),
			    .pid = pid,
			    .tid = tid,
			    .start_ns = start_ns,
			    .end_ns = start_ns + dur_ns},
	};
}

} // namespace

std::optional<CollectiveSpan> collective_of(const Span &s)
{
	if (!s.args.is_object())
		return std::nullopt;
	return collective(s.layer, s.name, s.pid, s.tid, s.start_ns, s.dur_ns, int_arg(s, "rank"), int_arg(s, "nranks"),
			  int_arg(s, "seq"));
}

// Where a probe's calls keep the three: the last argument of each name (as
// an args object keeps it), read as render_arg and int_arg would read it
// where its type is an integer's.
TypedCollectives::Plan TypedCollectives::plan(const ProbeSpec &p) const
{
	Plan plan;
	const char *names[3] = {"rank", "nranks", "seq"};
	Plan::How how[3] = {Plan::none, Plan::none, Plan::none};
	size_t slot = 0;
	for (const ArgSpec &a : p.args) {
		for (int k = 0; k < 3; k++) {
			if (a.name != names[k])
				continue;
			const bool integer = a.type == ArgType::I32 || a.type == ArgType::U32 ||
				a.type == ArgType::I64 || a.type == ArgType::U64 || a.type == ArgType::Bytes;
			how[k] = integer && slot < EACGM_MAX_ARGS ? Plan::ints : Plan::render;
			plan.slot[k] = int(slot), plan.type[k] = a.type;
		}
		slot += arg_width(a);
	}
	plan.rank = how[0];
	plan.how = std::max({how[0], how[1], how[2]});
	if (how[0] == Plan::none || how[1] == Plan::none || how[2] == Plan::none)
		plan.how = Plan::none;
	return plan;
}

const TypedCollectives::Plan &TypedCollectives::plan_of(const TypedSpans &ts, uint32_t spec_id)
{
	if (specs_ != ts.specs || plans_.size() != ts.specs->probes.size()) {
		specs_ = ts.specs;
		plans_.clear();
		for (const ProbeSpec &p : ts.specs->probes)
			plans_.push_back(plan(p));
	}
	return plans_[spec_id];
}

int64_t TypedCollectives::value(const TypedSpan &t, const Plan &p, int k)
{
	const uint64_t w = t.args[p.slot[k]];
	switch (p.type[k]) {
	case ArgType::I32: return int32_t(w);
	case ArgType::U32: return uint32_t(w);
	default: return int64_t(w); // a u64 past int64's range reads negative, as int_arg reads it
	}
}

std::optional<CollectiveSpan> TypedCollectives::of(const TypedSpans &ts, size_t i)
{
	const TypedSpan &t = ts.spans[i];
	const Plan &p = plan_of(ts, t.spec_id);
	if (p.how == Plan::none)
		return std::nullopt;
	if (p.how == Plan::render)
		return collective_of(span_at(ts, i));
	const ProbeSpec &spec = ts.specs->probes[t.spec_id];
	return collective(spec.layer, spec.function, t.pid, t.tid, t.start_ns, t.dur_ns, value(t, p, 0), value(t, p, 1),
			  value(t, p, 2));
}

std::optional<int64_t> TypedCollectives::rank(const TypedSpans &ts, size_t i)
{
	const Plan &p = plan_of(ts, ts.spans[i].spec_id);
	if (p.rank == Plan::none)
		return std::nullopt;
	if (p.rank == Plan::render)
		return int_arg(span_at(ts, i), "rank");
	return value(ts.spans[i], p, 0);
}

bool CollectiveMatcher::add(const Span &s, std::vector<Round> &done)
{
	auto c = collective_of(s);
	if (c)
		add(*c, done);
	return c.has_value();
}

void CollectiveMatcher::add(const CollectiveSpan &c, std::vector<Round> &done)
{
	newest_ns_ = std::max(newest_ns_, c.arrival.start_ns);
	auto &ids = by_key_[c.key];
	auto has_rank = [&](uint64_t id) {
		const auto &a = open_.at(id).arrivals;
		return std::any_of(a.begin(), a.end(), [&](const Arrival &x) { return x.rank == c.arrival.rank; });
	};
	auto it = std::find_if_not(ids.begin(), ids.end(), has_rank);
	uint64_t id;
	if (it != ids.end()) {
		id = *it;
	} else {
		id = next_id_++;
		ids.push_back(id);
		open_.emplace(id, Round{.key = c.key, .arrivals = {}});
	}
	auto &arrivals = open_.at(id).arrivals;
	auto pos =
		std::upper_bound(arrivals.begin(), arrivals.end(), c.arrival, [](const Arrival &a, const Arrival &b) {
			return std::tie(a.start_ns, a.rank) < std::tie(b.start_ns, b.rank);
		});
	arrivals.insert(pos, c.arrival);
	if (arrivals.size() == c.key.nranks)
		close(id, done);
	evict(done);
}

// Hands the round out and forgets it.
void CollectiveMatcher::close(uint64_t id, std::vector<Round> &done)
{
	auto node = open_.extract(id);
	auto ids = by_key_.find(node.mapped().key);
	std::erase(ids->second, id);
	if (ids->second.empty())
		by_key_.erase(ids);
	done.push_back(std::move(node.mapped()));
}

// The oldest rounds past the bounds, incomplete: a rank that never came
// (it died, or runs on a node this recording does not see) must not hold
// memory for ever.
void CollectiveMatcher::evict(std::vector<Round> &done)
{
	while (!open_.empty()) {
		const Round &oldest = open_.begin()->second;
		bool too_many = bounds_.max_open && open_.size() > bounds_.max_open;
		bool too_old = bounds_.window_ns && newest_ns_ - oldest.first_start_ns() > bounds_.window_ns;
		if (!too_many && !too_old)
			return;
		evicted_++;
		close(open_.begin()->first, done);
	}
}

void CollectiveMatcher::finish(std::vector<Round> &done)
{
	while (!open_.empty())
		close(open_.begin()->first, done);
}

std::vector<Round> match_collectives(const std::vector<Span> &spans)
{
	CollectiveMatcher m;
	std::vector<Round> rounds;
	for (const Span &s : spans)
		m.add(s, rounds);
	m.finish(rounds);
	sort_rounds(rounds);
	return rounds;
}

} // namespace eacgm
