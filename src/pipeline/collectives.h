// SPDX-License-Identifier: Apache-2.0
// One collective across ranks: the spans of the ranks of a process group
// that took part in the same collective, matched by their sequence number.
//
// A collective span is any span whose args hold the integers `rank`,
// `nranks` and `seq` (the gloo layer's, see specs/gloo.json; any layer that
// numbers its collectives per group alike on every rank may join). Its
// group key is (layer, nranks, seq, name): every rank gives the same
// collective the same key. nranks stands in for the process group's
// identity, which no rank's span carries: two process groups of the same
// size (two jobs traced together, or a job's subgroups of equal size) give
// their collectives the same keys, and their rounds mix. Where a rank
// already in the open round of a key arrives again, the arrival opens a
// round of its own, so that two groups of the same size, ranks numbered
// alike, still make whole rounds; which rank of which group pairs with
// which is then a guess (the oldest open round wins).
#pragma once
#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/model.h"
#include "pipeline/span.h"
#include "probe/spec.h"

namespace eacgm {

struct CollectiveKey {
	std::string layer;
	uint32_t nranks = 0;
	uint64_t seq = 0;
	std::string name;
	auto operator<=>(const CollectiveKey &) const = default;
};

// One rank's part in a round: its span's thread and times.
struct Arrival {
	uint32_t rank = 0;
	uint32_t pid = 0, tid = 0;
	uint64_t start_ns = 0, end_ns = 0;
};

// The spans of one collective, one per rank seen.
struct Round {
	CollectiveKey key;
	std::vector<Arrival> arrivals; // by start_ns, ties by rank: the last one arrived last
	// Every rank of the group was seen.
	bool complete() const { return arrivals.size() == key.nranks; }
	uint64_t first_start_ns() const { return arrivals.front().start_ns; }
	// The latest start less the earliest: how long the first rank waited
	// for the last before the collective could proceed.
	uint64_t skew_ns() const { return arrivals.back().start_ns - arrivals.front().start_ns; }
	// The last rank to arrive (of those seen, while incomplete).
	const Arrival &last() const { return arrivals.back(); }
};

// The key and the arrival of a collective span; nullopt for any other span
// and for groups of one (no one to wait for) or args out of range.
struct CollectiveSpan {
	CollectiveKey key;
	Arrival arrival;
};
std::optional<CollectiveSpan> collective_of(const Span &s);
// An integer argument of a span; nullopt when absent or not an integer.
std::optional<int64_t> int_arg(const Span &s, const char *name);

// collective_of for typed spans, without making their Spans: where each
// probe keeps rank, nranks and seq is worked out once per probe set. The
// same answer as collective_of(span_at(ts, i)) (test_collectives).
class TypedCollectives {
public:
	std::optional<CollectiveSpan> of(const TypedSpans &ts, size_t i);
	// int_arg(span_at(ts, i), "rank"): the rank alone, collective or not.
	std::optional<int64_t> rank(const TypedSpans &ts, size_t i);

private:
	struct Plan {
		enum How { none, ints, render }; // render: an argument's type is not an integer's
		How how = none;                  // all three
		How rank = none;                 // the rank alone
		int slot[3] = {};                // rank, nranks, seq
		ArgType type[3] = {};
	};
	Plan plan(const ProbeSpec &p) const;
	const Plan &plan_of(const TypedSpans &ts, uint32_t spec_id);
	static int64_t value(const TypedSpan &t, const Plan &p, int k);
	const SpecSet *specs_ = nullptr;
	std::vector<Plan> plans_; // by spec_id
};

// The args a collective span has, as integers (for readers that filter
// spans before making them: RecordingReader::each_span_with_int_args).
inline const std::vector<std::string> kCollectiveArgs = {"rank", "nranks", "seq"};

// Matches collective spans into rounds as they come, in any order. A round
// is handed out once every rank of it was seen; those still open when the
// spans end, or evicted by the bounds, are handed out incomplete.
class CollectiveMatcher {
public:
	struct Bounds {
		// Rounds opened longer ago than this, in the spans' time (the
		// newest start seen less the round's first start), are evicted;
		// 0: never.
		uint64_t window_ns = 0;
		// At most this many open rounds: past it the oldest is evicted;
		// 0: no cap. Memory is then bounded by max_open rounds of
		// nranks arrivals (32 bytes each) and their keys.
		size_t max_open = 0;
	};
	CollectiveMatcher() = default; // unbounded: offline, over a whole recording
	explicit CollectiveMatcher(Bounds bounds) : bounds_(bounds) {}

	// Takes s if it is a collective span (returns whether it was): the
	// rounds it completes, and those the bounds evict, are appended to done.
	bool add(const Span &s, std::vector<Round> &done);
	// The same for a span already taken apart (collective_of).
	void add(const CollectiveSpan &c, std::vector<Round> &done);
	// Appends every open round, incomplete, oldest first, and forgets them.
	void finish(std::vector<Round> &done);
	size_t open() const { return open_.size(); }
	uint64_t evicted() const { return evicted_; } // incomplete rounds handed out by the bounds

private:
	void close(uint64_t id, std::vector<Round> &done);
	void evict(std::vector<Round> &done);

	Bounds bounds_;
	uint64_t next_id_ = 0, newest_ns_ = 0, evicted_ = 0;
	std::map<uint64_t, Round> open_;                       // by id: the order rounds opened in
	std::map<CollectiveKey, std::deque<uint64_t>> by_key_; // the open rounds of a key, oldest first
};

// Orders rounds by their first arrival, then key (stable).
void sort_rounds(std::vector<Round> &rounds);
// Every round of the spans (offline, unbounded), complete or not, ordered
// as sort_rounds does.
std::vector<Round> match_collectives(const std::vector<Span> &spans);

} // namespace eacgm
