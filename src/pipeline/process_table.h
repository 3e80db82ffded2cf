// SPDX-License-Identifier: Apache-2.0
// The processes and threads of a recording, as the records and the System
// (pipeline/sources.h) tell them: made known on first sight with what /proc
// says, their exits watched (pidfds) and taken from the kernel's records,
// handed to the sinks when new, renamed or (serve) ended. Nothing here reads
// /proc itself, and nothing is asked of the System inside a ring callback:
// threads are noted there and named after the round (name_threads).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "common/model.h"
#include "common/result.h"
#include "pipeline/sink.h"
#include "pipeline/sources.h"

namespace eacgm {

class ProcessTable {
public:
	explicit ProcessTable(System &system) : system_(system) {}
	// serve: an ended process is handed on whole (its end and exit code,
	// its threads) and forgotten, with everything kept about it; the table
	// holds the live ones only.
	void forget_ended() { forget_ended_ = true; }

	// The process, made known on first ask: what the System says of it, its
	// exit watched (through pidfd where given: opened before the process
	// was tracked, so that a pid reused since cannot stand in for it).
	// `created`: whether this call made it known.
	Process &get(uint32_t pid, UniqueFd pidfd = {}, bool *created = nullptr);
	const Process *find(uint32_t pid) const;
	bool known(uint32_t pid) const { return processes_.count(pid) != 0; }
	// A process known only from its exit record: gone from /proc.
	void add_ended(Process p);
	// Its name changed (exec): the sinks hear of it again.
	void renamed(uint32_t pid) { unannounced_.insert(pid); }

	void set_exit(uint32_t pid, int exit_code, uint64_t end_ns);
	// The kernel's exit record: its time stands over one noted before the
	// record was read (the pidfd woke first, or it had exited when first
	// seen).
	void exit_record(uint32_t pid, int exit_code, uint64_t end_ns);
	// Ends the processes whose pidfds say they exited and whose exit the
	// BPF side has not reported: those that exited before they were
	// tracked (during attach), or whose exit record was lost.
	void end_exited(uint64_t now_ns);

	// A thread seen in a record made at at_ns: noted (cheap, in a ring
	// callback), named by name_threads after the round.
	void note_thread(uint32_t pid, uint32_t tid, uint64_t at_ns);
	void name_threads();
	// serve: a process the filters exclude: its threads are not kept.
	void drop_threads(uint32_t pid);

	// serve: whether a call belongs to a process already handed on as
	// ended (read late, from another ring): stored, without bringing the
	// process back. A pid reused since makes its calls after the end.
	bool ended_call(uint32_t pid, uint64_t start_ns) const;

	// New and renamed processes to the sinks.
	Result<void> announce(Sink &out);
	// serve: the ended processes to the sinks, then forgotten; the pids
	// forgotten (the caller drops what it keeps about them).
	Result<std::vector<uint32_t>> retire(Sink &out, uint64_t now_ns);
	// serve: forgets the ended processes' ends once their last calls must
	// have been read.
	void sweep(uint64_t now_ns);
	// Every process and thread to the sinks (record's end).
	Result<void> finish(Sink &out);

	bool live(uint32_t pid) const { return live_.count(pid) != 0; }
	const std::set<uint32_t> &live() const { return live_; }
	bool exited(uint32_t pid) const { return known(pid) && !live(pid); }
	std::set<uint32_t> pids() const;
	size_t size() const { return processes_.size(); }
	// Exit watches that failed (out of descriptors: the exit record still
	// ends the process).
	std::vector<std::string> take_warnings() { return std::exchange(warnings_, {}); }

private:
	Result<void> hand_on_threads(Sink &out, uint32_t pid, const std::string &comm);

	System &system_;
	bool forget_ended_ = false;
	std::map<uint32_t, Process> processes_;
	std::set<uint32_t> live_;
	std::vector<uint32_t> exited_; // known exited from their pidfd, not yet ended
	std::map<std::pair<uint32_t, uint32_t>, std::string> threads_;
	std::vector<std::pair<uint32_t, uint32_t>> unnamed_; // threads noted, not yet named
	std::set<uint32_t> unannounced_;                     // new or renamed since the sinks last heard of them
	std::vector<uint32_t> ended_;                        // serve: exited, to hand on and forget
	// serve: processes handed on as ended and forgotten: when each ended
	// and when it was forgotten, and its name for threads noted since.
	struct Retired {
		uint64_t end_ns, at_ns;
		std::string comm;
	};
	std::map<uint32_t, Retired> retired_;
	std::set<uint32_t> late_threads_; // retired pids with threads noted since
	// serve: ended by their pidfds, their exit records not read yet: when.
	std::map<uint32_t, uint64_t> awaiting_record_;
	static constexpr uint64_t kExitRecordWaitNs = 1'000'000'000;
	static constexpr uint64_t kRetiredKeepNs = 10'000'000'000;
	std::vector<std::string> warnings_;
};

} // namespace eacgm
