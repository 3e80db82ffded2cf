// SPDX-License-Identifier: Apache-2.0
#include "pipeline/process_table.h"

#include <algorithm>

#include "pipeline/identity.h"

namespace eacgm {

Process &ProcessTable::get(uint32_t pid, UniqueFd pidfd, bool *created)
{
	auto [it, fresh] = processes_.try_emplace(pid);
	if (created)
		*created = fresh;
	Process &p = it->second;
	if (!fresh)
		return p;
	p.pid = pid;
	p.comm = system_.comm(pid);
	p.cmdline = system_.cmdline(pid);
	if (auto ppid = system_.parent(pid))
		p.ppid = *ppid;
	CgroupInfo cg = system_.cgroup(pid);
	p.cgroup = std::move(cg.path);
	p.container_id = std::move(cg.container_id);
	p.pod_uid = std::move(cg.pod_uid);
	JobIdentity id = job_identity_of(system_.environment(pid));
	p.job = std::move(id.job);
	p.rank = id.rank;
	unannounced_.insert(pid);
	live_.insert(pid);
	auto st = system_.watch(pid, std::move(pidfd));
	if (st && *st != PidState::alive)
		exited_.push_back(pid); // ended after this round's records
	if (!st)
		warnings_.push_back(st.error().message);
	return p;
}

const Process *ProcessTable::find(uint32_t pid) const
{
	auto it = processes_.find(pid);
	return it == processes_.end() ? nullptr : &it->second;
}

void ProcessTable::add_ended(Process p)
{
	uint32_t pid = p.pid;
	processes_[pid] = std::move(p);
	if (forget_ended_)
		ended_.push_back(pid);
}

void ProcessTable::set_exit(uint32_t pid, int exit_code, uint64_t end_ns)
{
	Process &p = get(pid);
	p.exit_code = exit_code;
	if (!p.end_ns)
		p.end_ns = end_ns;
	if (live_.erase(pid) && forget_ended_)
		ended_.push_back(pid);
	system_.unwatch(pid);
}

void ProcessTable::exit_record(uint32_t pid, int exit_code, uint64_t end_ns)
{
	set_exit(pid, exit_code, end_ns);
	processes_.at(pid).end_ns = end_ns;
	awaiting_record_.erase(pid);
}

void ProcessTable::end_exited(uint64_t now_ns)
{
	for (uint32_t pid : system_.take_exited())
		exited_.push_back(pid);
	for (uint32_t pid : std::exchange(exited_, {}))
		if (live_.count(pid)) { // the exit code, while its parent has not reaped it
			set_exit(pid, system_.exit_status(pid).value_or(-1), now_ns);
			awaiting_record_[pid] = now_ns;
		}
}

void ProcessTable::note_thread(uint32_t pid, uint32_t tid, uint64_t at_ns)
{
	if (!threads_.try_emplace({pid, tid}).second)
		return;
	unnamed_.push_back({pid, tid});
	if (!known(pid) && ended_call(pid, at_ns))
		late_threads_.insert(pid);
}

void ProcessTable::name_threads()
{
	for (auto key : std::exchange(unnamed_, {})) {
		auto t = threads_.find(key);
		if (t == threads_.end())
			continue; // its process was excluded meanwhile
		t->second = system_.thread_name(key.first, key.second);
		if (auto p = processes_.find(key.first); t->second.empty() && p != processes_.end())
			t->second = p->second.comm; // else named at the end, from its process
	}
}

void ProcessTable::drop_threads(uint32_t pid)
{
	threads_.erase(threads_.lower_bound({pid, 0}), threads_.lower_bound({pid + 1, 0}));
}

bool ProcessTable::ended_call(uint32_t pid, uint64_t start_ns) const
{
	auto r = retired_.find(pid);
	return r != retired_.end() && start_ns <= r->second.end_ns;
}

Result<void> ProcessTable::announce(Sink &out)
{
	for (uint32_t pid : std::exchange(unannounced_, {}))
		if (auto p = processes_.find(pid); p != processes_.end())
			if (auto r = out.process(p->second); !r)
				return r;
	return {};
}

Result<std::vector<uint32_t>> ProcessTable::retire(Sink &out, uint64_t now_ns)
{
	std::vector<uint32_t> gone;
	name_threads(); // those noted since the round was read go with them, named
	std::vector<uint32_t> later;
	for (uint32_t pid : std::exchange(ended_, {})) {
		auto p = processes_.find(pid);
		if (p == processes_.end() || live_.count(pid))
			continue;
		// Ended by its pidfd, which can wake between a ring's read and
		// the exit record's write: the record (the exit code, which a
		// reaped process no longer shows, and the time) is waited for.
		if (auto a = awaiting_record_.find(pid); a != awaiting_record_.end()) {
			if (now_ns < a->second + kExitRecordWaitNs) {
				later.push_back(pid);
				continue;
			}
			awaiting_record_.erase(a);
		}
		if (auto r = out.process(p->second); !r)
			return r.error();
		if (auto r = hand_on_threads(out, pid, p->second.comm); !r)
			return r.error();
		retired_[pid] = {p->second.end_ns ? p->second.end_ns : now_ns, now_ns, p->second.comm};
		processes_.erase(p);
		gone.push_back(pid);
	}
	ended_ = std::move(later);
	// Threads first seen in calls read after their process was handed on.
	for (uint32_t pid : std::exchange(late_threads_, {})) {
		auto ret = retired_.find(pid);
		if (auto r = hand_on_threads(out, pid, ret == retired_.end() ? "" : ret->second.comm); !r)
			return r.error();
	}
	return gone;
}

Result<void> ProcessTable::hand_on_threads(Sink &out, uint32_t pid, const std::string &comm)
{
	auto first = threads_.lower_bound({pid, 0}), last = threads_.lower_bound({pid + 1, 0});
	for (auto t = first; t != last; ++t)
		if (auto r = out.thread({pid, t->first.second, t->second.empty() ? comm : t->second}); !r)
			return r;
	threads_.erase(first, last);
	return {};
}

void ProcessTable::sweep(uint64_t now_ns)
{
	std::erase_if(retired_, [&](const auto &r) { return now_ns - r.second.at_ns > kRetiredKeepNs; });
}

Result<void> ProcessTable::finish(Sink &out)
{
	name_threads();
	for (auto &[pid, p] : processes_)
		if (auto r = out.process(p); !r)
			return r;
	for (auto &[key, name] : threads_) {
		// A short-lived process may be gone before its thread was named,
		// and its fork record (with the name) read after its first span.
		if (auto p = processes_.find(key.first); name.empty() && p != processes_.end())
			name = p->second.comm;
		if (auto r = out.thread({key.first, key.second, name}); !r)
			return r;
	}
	return {};
}

std::set<uint32_t> ProcessTable::pids() const
{
	std::set<uint32_t> s;
	for (auto &[pid, p] : processes_)
		s.insert(pid);
	return s;
}

} // namespace eacgm
