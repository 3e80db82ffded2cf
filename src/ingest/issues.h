// Work one call issues and another runs (spec key "issues", IssueRule):
// torch's c10d::ProcessGroupGloo::allreduce, on the caller's thread, only
// enqueues the collective that gloo's allreduce runs on a worker thread. The
// issuing call knows what the caller asked for (the tensor's dtype and
// shape, the reduce op) and the Python line that asked; the running call
// knows how long the work took. The linker makes the running call's span
// whole: it is given the issuing call's arguments it lacks, its Python stack,
// and args issued_ns, issued_tid and issued_by (the issuing span: what the
// trace links it to).
//
// The two are the same work when they are in the same process and the
// arguments the rule names ("by": the process group's context and the
// collective's sequence number) are equal. The issuing call normally
// returns (and is read) before the work ends; when the worker is faster
// than the caller's return, the running call is held back until the next
// batch, at most kHoldNs past its end, and then goes as it is.
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
	// A call of a probe with an issue rule was read.
	void issued(const Span &s, const IssueRule &rule);
	// Joins the running calls of `spans` to what issued them, in place.
	// Those not joined that may still be (ended less than kHoldNs before
	// now_ns, and not `final`: all that was read is being written) are
	// moved out of `spans` and come back at the front of the next call's.
	void link(std::vector<Span> &spans, uint64_t now_ns, bool final);
	// Issued calls not (yet) joined to a running one.
	size_t pending() const { return issued_.size(); }
	size_t held() const { return held_.size(); }

	static constexpr uint64_t kHoldNs = 500'000'000;
	// An issued call whose work was not seen in this long is forgotten
	// (its work ran in a layer not recorded, or was lost).
	static constexpr uint64_t kForgetNs = 60'000'000'000;

private:
	struct Issued {
		Span span;
		std::vector<std::string> by;
	};
	// "pid|layer|value|value...": the same for the issuing and the running
	// call of one piece of work; empty when the span lacks an argument.
	static std::string key(const Span &s, const std::string &layer, const std::vector<std::string> &by);
	static void join(Span &ran, const Issued &by);
	// Tries each rule of the span's layer; true when it was joined.
	bool try_join(Span &s);

	std::map<std::string, std::vector<std::vector<std::string>>> by_layer_; // running layer -> "by" lists
	std::map<std::string, Issued> issued_;
	std::vector<Span> held_;
};

} // namespace eacgm
