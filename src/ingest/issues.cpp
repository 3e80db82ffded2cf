#include "ingest/issues.h"

#include <algorithm>
#include <set>

namespace eacgm {

IssueLinker::IssueLinker(const std::vector<ProbeSpec> &probes)
{
	std::set<std::pair<std::string, std::vector<std::string>>> seen;
	for (auto &p : probes)
		if (p.issues && seen.insert({p.issues->layer, p.issues->by}).second)
			by_layer_[p.issues->layer].push_back(p.issues->by);
}

std::string IssueLinker::key(const Span &s, const std::string &layer, const std::vector<std::string> &by)
{
	std::string k = std::to_string(s.pid) + "|" + layer;
	for (auto &name : by) {
		auto it = s.args.find(name);
		if (it == s.args.end())
			return "";
		k += "|" + it->dump();
	}
	return k;
}

void IssueLinker::issued(const Span &s, const IssueRule &rule)
{
	std::string k = key(s, rule.layer, rule.by);
	if (!k.empty())
		issued_[k] = Issued{s, rule.by};
}

void IssueLinker::join(Span &ran, const Issued &by)
{
	const Span &issuer = by.span;
	for (auto &[name, value] : issuer.args.items())
		if (!ran.args.contains(name))
			ran.args[name] = value;
	if (ran.py_stack.empty())
		ran.py_stack = issuer.py_stack;
	ran.args["issued_ns"] = issuer.start_ns;
	ran.args["issued_tid"] = issuer.tid;
	ran.args["issued_by"] = issuer.name;
}

bool IssueLinker::try_join(Span &s)
{
	auto rules = by_layer_.find(s.layer);
	if (rules == by_layer_.end())
		return false;
	for (auto &by : rules->second) {
		auto it = issued_.find(key(s, s.layer, by));
		if (it != issued_.end()) {
			join(s, it->second);
			issued_.erase(it);
			return true;
		}
	}
	return false;
}

void IssueLinker::link(std::vector<Span> &spans, uint64_t now_ns, bool final)
{
	if (!active())
		return;
	// Last round's held spans first: they ended before these.
	std::vector<Span> held = std::move(held_);
	held_.clear();
	held.insert(held.end(), std::make_move_iterator(spans.begin()), std::make_move_iterator(spans.end()));
	spans.clear();
	for (Span &s : held) {
		bool runs = by_layer_.count(s.layer) != 0;
		if (!runs || try_join(s) || final || s.start_ns + s.dur_ns + kHoldNs <= now_ns)
			spans.push_back(std::move(s));
		else
			held_.push_back(std::move(s));
	}
	// Issued work never seen to run is forgotten after a while.
	for (auto it = issued_.begin(); it != issued_.end();) {
		const Span &s = it->second.span;
		if (s.start_ns + s.dur_ns + kForgetNs <= now_ns)
			it = issued_.erase(it);
		else
			++it;
	}
}

} // namespace eacgm
