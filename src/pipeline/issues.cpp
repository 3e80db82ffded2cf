// SPDX-License-Identifier: Apache-2.0
#include "pipeline/issues.h"

#include <algorithm>
#include <set>

namespace eacgm {

IssueLinker::IssueLinker(const std::vector<ProbeSpec> &probes)
{
	std::set<std::pair<std::string, std::vector<std::string>>> seen;
	for (auto &p : probes)
		for (auto &rule : p.issues)
			if (seen.insert({rule.layer, rule.by}).second)
				by_layer_[rule.layer].push_back(rule.by);
}

bool IssueLinker::involves(const ProbeSpec &p) const
{
	if (!active())
		return false;
	if (!p.issues.empty())
		return true;
	auto rules = by_layer_.find(p.layer);
	if (rules == by_layer_.end())
		return false;
	auto keeps = [&](const std::string &name) {
		return std::any_of(p.args.begin(), p.args.end(), [&](const ArgSpec &a) { return a.name == name; });
	};
	return std::any_of(rules->second.begin(), rules->second.end(), [&](const std::vector<std::string> &by) {
		return std::all_of(by.begin(), by.end(), keeps);
	});
}

std::string IssueLinker::key(const Span &s, const std::string &layer, const std::vector<std::string> &by)
{
	// A span that keeps none of a rule's arguments (an enqueue's, for its
	// own layer's rule) is not that rule's: nothing is built for it. The
	// probes that keep none of any rule's arguments do not come here at all
	// (involves(): the record loop keeps them typed).
	for (auto &name : by)
		if (!s.args.contains(name))
			return "";
	std::string k = std::to_string(s.pid) + "|" + layer;
	for (auto &name : by)
		k += "|" + s.args.at(name).dump();
	return k;
}

static bool same_call(const Span &a, const Span &b)
{
	return a.pid == b.pid && a.tid == b.tid && a.start_ns == b.start_ns && a.name == b.name;
}

void IssueLinker::join(Span &ran, const Span &issuer)
{
	for (auto &[name, value] : issuer.args.items())
		if (!ran.args.contains(name))
			ran.args[name] = value;
	if (ran.py_stack.empty())
		ran.py_stack = issuer.py_stack;
	ran.args["issued_ns"] = issuer.start_ns;
	ran.args["issued_tid"] = issuer.tid;
	ran.args["issued_by"] = issuer.name;
}

IssueLinker::Outcome IssueLinker::try_join(Span &s)
{
	auto rules = by_layer_.find(s.layer);
	if (rules == by_layer_.end())
		return Outcome::unrelated;
	Outcome out = Outcome::unrelated;
	for (auto &by : rules->second) {
		std::string k = key(s, s.layer, by);
		if (k.empty())
			continue; // the span keeps no such arguments: not this rule's
		auto it = issued_.find(k);
		if (it == issued_.end()) {
			out = Outcome::waiting;
			continue;
		}
		if (same_call(it->second, s))
			continue; // the issuing call itself (an enqueue keeps the Work it made)
		join(s, it->second);
		issued_.erase(it);
		return Outcome::joined;
	}
	return out;
}

bool IssueLinker::see(Span &s, const std::vector<IssueRule> &rules)
{
	if (!active())
		return true;
	// A later issue under the same key replaces an earlier one: the key
	// names an object (a Work) whose address the earlier one's freed.
	for (auto &rule : rules) {
		std::string k = key(s, rule.layer, rule.by);
		if (k.empty())
			continue;
		issued_[k] = s;
		if (issued_.size() > kMaxIssued && s.start_ns > kCrowdedNs)
			forget_before(s.start_ns - kCrowdedNs);
		// Work that ran before its issue was read (the worker was faster
		// than the caller's return) waits for it here.
		for (Held &h : held_)
			if (!h.joined && h.span.layer == rule.layer && try_join(h.span) == Outcome::joined)
				h.joined = true;
	}
	// Registered first: an enqueue keeps the Work it made, and a wait's
	// rule must not take it for a wait still to be joined (same_call).
	if (try_join(s) != Outcome::waiting)
		return true;
	held_.push_back({std::move(s), false});
	return false;
}

void IssueLinker::release(std::vector<Span> &out, uint64_t now_ns, bool final)
{
	std::vector<Held> still;
	for (Held &h : held_) {
		if (h.joined || final || h.span.start_ns + h.span.dur_ns + kHoldNs <= now_ns)
			out.push_back(std::move(h.span));
		else
			still.push_back(std::move(h));
	}
	held_ = std::move(still);
	// Issued work never seen to run is forgotten after a while.
	if (now_ns > kForgetNs)
		forget_before(now_ns - kForgetNs);
}

void IssueLinker::forget_before(uint64_t t_ns)
{
	for (auto it = issued_.begin(); it != issued_.end();) {
		const Span &s = it->second;
		if (s.start_ns + s.dur_ns < t_ns)
			it = issued_.erase(it);
		else
			++it;
	}
}

} // namespace eacgm
