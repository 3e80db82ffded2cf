#include "ingest/collectives.h"

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

std::optional<CollectiveSpan> collective_of(const Span &s)
{
	if (!s.args.is_object())
		return std::nullopt;
	auto rank = int_arg(s, "rank"), nranks = int_arg(s, "nranks"), seq = int_arg(s, "seq");
	// A rank not yet known is read as -1 (the nccl layer's before its
	// communicator's init): not a place in a round.
	if (!rank || !nranks || !seq || *nranks < 2 || *nranks > UINT32_MAX || *rank < 0 || *rank >= *nranks ||
	    *seq < 0)
		return std::nullopt;
	return CollectiveSpan{
		.key = {.layer = s.layer,
			.nranks = static_cast<uint32_t>(*nranks),
			.seq = static_cast<uint64_t>(*seq),
			.name = s.name},
		.arrival = {.rank = static_cast<uint32_t>(*rank),
			    .pid = s.pid,
			    .tid = s.tid,
			    .start_ns = s.start_ns,
			    .end_ns = s.start_ns + s.dur_ns},
	};
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
