// SPDX-License-Identifier: Apache-2.0
// Work one call issues and another runs or waits for (spec key "issues",
// IssueRule): torch's c10d::ProcessGroupGloo::allreduce, on the caller's
// thread, only enqueues the collective that gloo's allreduce runs on a worker
// thread, and that the caller's c10d::Work::wait then waits for. The issuing
// call knows what the caller asked for (the tensor's dtype and shape, the
// reduce op, the sequence number) and the Python line that asked; the
// running call knows how long the work took, the wait how long the caller
// waited. The linker makes their spans whole: each is given the issuing
// call's arguments it lacks, its Python stack, and args issued_ns,
// issued_tid and issued_by (the issuing span: what the trace links it to).
//
// The two are the same work when they are in the same process and the
// arguments a rule names are equal: the process group's context and the
// collective's sequence number (gloo), the Work the enqueue returned and the
// wait's `this` (torch). The issuing call normally returns (and is read)
// before the work ends; when the worker is faster than the caller's return,
// the running call is held back until the next batch, at most kHoldNs past
// its end, and then goes as it is.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/model.h"
#include "probe/spec.h"

namespace eacgm {

class IssueLinker {
public:
	// The rules of the probes that may issue work (a spec set's).
	explicit IssueLinker(const std::vector<ProbeSpec> &probes);
	// Whether any probe issues work: without one, spans pass untouched.
	bool active() const { return !by_layer_.empty(); }
	// Whether the linker looks at a probe's calls: they issue work, or may
	// run or wait for work that was issued (their layer has a rule whose
	// arguments the probe keeps: c10d::Work::wait's `work`, gloo's group and
	// seq). The rest of a layer with rules (every other torch operator)
	// passes untouched: key() finds none of a rule's arguments in them.
	bool involves(const ProbeSpec &p) const;
	// A span as it is read (in the order calls returned), with the rules of
	// its probe: joined to what issued it when it ran or waited for issued
	// work (and the issue was read), and remembered when it issues work.
	// Returns false when the linker took the span to hold it: it ran work
	// whose issue is not read yet, and comes back from release().
	bool see(Span &s, const std::vector<IssueRule> &rules);
	// Appends the held spans that were joined since, or ended kHoldNs before
	// now_ns or more, or all of them when `final` (all that was read is
	// being written); forgets issues older than kForgetNs.
	void release(std::vector<Span> &out, uint64_t now_ns, bool final);

	static constexpr uint64_t kHoldNs = 500'000'000;
	// An issued call whose work was not seen in this long is forgotten
	// (its work ran in a layer not recorded, or was lost).
	static constexpr uint64_t kForgetNs = 60'000'000'000;
	// Issues kept at most: past it, those more than kCrowdedNs older than
	// the call being read are forgotten (a job enqueueing thousands of
	// collectives a second whose Works nobody waits on: DDP's buckets are
	// waited on through futures).
	static constexpr size_t kMaxIssued = 4096;
	static constexpr uint64_t kCrowdedNs = 1'000'000'000;

private:
	enum class Outcome {
		unrelated, // no rule's arguments: not the running end of any issue
		waiting,   // a rule's arguments, and no issuing call seen yet
		joined,
	};
	struct Held {
		Span span;
		bool joined = false;
	};
	// "pid|layer|value|value...": the same for the issuing and the running
	// call of one piece of work; empty when the span lacks an argument.
	static std::string key(const Span &s, const std::string &layer, const std::vector<std::string> &by);
	static void join(Span &ran, const Span &issuer);
	// Tries each rule of the span's layer.
	Outcome try_join(Span &s);
	// Forgets the issues that ended before t_ns.
	void forget_before(uint64_t t_ns);

	std::map<std::string, std::vector<std::vector<std::string>>> by_layer_; // running layer -> "by" lists
	std::map<std::string, Span> issued_;
	std::vector<Held> held_;
};

} // namespace eacgm
