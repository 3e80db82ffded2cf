// SPDX-License-Identifier: Apache-2.0
// The agent's side of the exception guard (bpf/span.bpf.c says what the
// guard is for and what its programs do): a thread that answers the
// programs' requests. A request comes from a thread that has stopped its
// process (SIGSTOP) so that its stack holds still; the answer writes the
// slots it names (process_vm_writev: a locked-down kernel lets no BPF
// program write user memory), marks a restore done for the thread's
// program, and resumes the process (SIGCONT). And a watchdog process that
// resumes whatever the guard stopped if the agent dies before it could.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/result.h"
#include "eacgm/abi/events.h"

struct bpf_map;
struct ring_buffer;

namespace eacgm {

struct GuardCounts {
	uint64_t requests = 0; // answered
	uint64_t restored = 0; // return addresses written back for an unwinder
	uint64_t rearmed = 0;  // trampolines written back for frames that live on
	uint64_t failed = 0;   // slots that could not be written (the process refused the write)
	uint64_t moot = 0;     // requests that no longer stood when answered (the thread had gone on)
	// How long processes stayed stopped, from a request to its SIGCONT.
	uint64_t held_ns = 0, max_held_ns = 0;
};

// What answering needs of the machine; a test stands in for it.
class GuardSystem {
public:
	virtual ~GuardSystem() = default;
	// The thread's state letter as /proc shows it ('T' or 't': stopped), 0 when it is gone.
	virtual char state(uint32_t tgid, uint32_t tid) = 0;
	// The user stack and instruction pointers of a stopped thread (/proc/TID/syscall).
	virtual std::optional<uint64_t> stack_pointer(uint32_t tgid, uint32_t tid) = 0;
	virtual std::optional<uint64_t> instruction_pointer(uint32_t tgid, uint32_t tid) = 0;
	// The thread's side of the guard as its program keeps it.
	virtual std::optional<eacgm_guard_thread> guard_state(uint32_t tid) = 0;
	virtual bool read(uint32_t tid, uint64_t addr, uint64_t &value) = 0;
	virtual bool write(uint32_t tid, uint64_t addr, uint64_t value) = 0;
	// Tells the thread's program that its restore `seq` is carried out.
	virtual void mark_done(uint32_t tid, uint64_t seq) = 0;
	// SIGCONT to the process, once the guard's record of its stop is gone.
	virtual void resume(uint32_t tgid) = 0;
	virtual uint64_t now_ns() = 0;
	// Lets other threads run for about `us` (0: a yield of the CPU).
	virtual void pause_us(unsigned us) = 0;
};

// How requests are answered, apart from where they come from (testable
// alone). Not thread-safe: one GuardServer thread calls it.
class GuardAnswerer {
public:
	explicit GuardAnswerer(GuardSystem &sys) : sys_(sys) {}
	// How long an answer waits for its thread to be stopped. A restore's
	// thread that a SIGCONT freed early stops again at its walk's next step
	// (microseconds); a rearm's does not, and the rearm is then moot.
	static constexpr uint64_t kRestoreWaitNs = 1'000'000'000, kRearmWaitNs = 10'000'000;
	// Carries out one request, waiting for its thread to be stopped; the
	// process is resumed at resume_all().
	void answer(const eacgm_guard_request &r);
	// The processes the requests answered since the last call came from,
	// to be resumed now: how long they were held is counted up to here.
	std::set<uint32_t> finish_batch();
	// finish_batch(), and each process resumed.
	void resume_all();
	const GuardCounts &counts() const { return counts_; }

private:
	bool wait_stopped(const eacgm_guard_request &r, uint64_t wait_ns);
	bool stands(const eacgm_guard_request &r);

	GuardSystem &sys_;
	GuardCounts counts_;
	std::set<uint32_t> to_resume_;
	std::vector<uint64_t> asked_ns_; // of the requests answered since resume_all()
};

class GuardServer {
public:
	struct Maps {
		struct bpf_map *requests; // the ring
		int guards = -1;          // task storage: struct eacgm_guard_thread
		int done = -1;            // task storage: __u64, written here
		int stopped = -1;         // hash: tgid -> 1, processes a guard program stopped
	};
	// Starts the answering thread and the watchdog.
	static Result<std::unique_ptr<GuardServer>> start(const Maps &maps);
	// Answers what is left (the guard's probes are gone by then), resumes
	// every process still stopped, and lets the watchdog go.
	~GuardServer();
	GuardServer(const GuardServer &) = delete;
	GuardServer &operator=(const GuardServer &) = delete;

	GuardCounts counts() const;

private:
	GuardServer() = default;
	void run();
	void drain();

	Maps maps_;
	std::unique_ptr<GuardSystem> sys_;
	std::unique_ptr<GuardAnswerer> answerer_;
	struct ring_buffer *rb_ = nullptr;
	std::vector<eacgm_guard_request> batch_;
	UniqueFd wake_;     // an eventfd: the destructor's word to stop
	UniqueFd watchdog_; // the pipe the watchdog waits on: closed, it answers what is left and goes
	pid_t watchdog_pid_ = -1;
	mutable std::mutex mu_;
	GuardCounts counts_;
	std::thread thread_;
};

} // namespace eacgm
