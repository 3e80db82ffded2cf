// SPDX-License-Identifier: Apache-2.0
// The ring-draining thread: reads a source's records as soon as its rings
// wake it, into a bounded queue in memory, and hands them to the pipeline's
// thread in the order they were read. Nothing else runs on it (a check
// counts any slow work that does: common/threads.h): process discovery
// (/proc, maps, ELF files, Python offsets, probes attached after an exec),
// decoding, joining and every sink run on the pipeline's thread, and however
// long one of them takes, the rings are read meanwhile. Before, they were
// read between two rounds of that work, and one slow round (an import that
// maps dozens of libraries, two hundred Python processes starting) left a
// small ring full.
//
// The queue is bounded (max_queued_bytes): past it the thread stops reading
// until the pipeline takes what is queued, and the rings fill as before, the
// BPF side counting what it could not write (lost records: ring full). So
// memory stays bounded and every loss is counted where it happens.
//
// It is itself a RecordSource: fd() is readable when records are queued,
// and consume() hands over everything queued; when the pipeline was woken by
// something else (a pidfd, a timeout), it has the thread read the rings once
// more first (a process's exit record is written before its pidfd wakes the
// pipeline, which expects to find it). The pipeline's
// thread never reads the rings itself while the thread runs, nor holds the
// queue's lock longer than a swap: a thread descheduled while holding what
// the reader needs would stall the reader with it (tried: the pipeline's
// thread reading the rings under the lock lost more records than no thread
// at all when 25 processes started at once).
#pragma once
#include <condition_variable>
#include <memory>
#include <cstdint>
#include <mutex>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "pipeline/sources.h"

namespace eacgm {

// Records as 8-byte words, grown without zeroing what is about to be
// written over, and kept for the next read once handed over (the copy a
// record costs on its way through the queue is one memcpy).
class Words {
public:
	uint64_t *append(size_t n);
	const uint64_t *data() const { return p_.get(); }
	size_t size() const { return size_; }
	bool empty() const { return size_ == 0; }
	void clear() { size_ = 0; }

private:
	std::unique_ptr<uint64_t[]> p_;
	size_t size_ = 0, cap_ = 0;
};

class RingReader : public RecordSource {
public:
	struct Options {
		size_t max_queued_bytes = 64u << 20; // about 3 s of 160,000 calls a second
		int nice = 0;                        // the thread's niceness (its own, where it may not set this one)
	};
	// What the thread did, for the recording's meta and the tests.
	struct Stats {
		uint64_t rounds = 0;              // reads of the rings by the thread
		uint64_t records = 0;             // records they read
		uint64_t max_wake_to_read_ns = 0; // the longest from a wakeup of the rings to the end of its read
		uint64_t max_queued_bytes = 0;    // the most bytes queued at once
		uint64_t full_waits = 0;          // times the queue was full and the rings left unread
		bool short_slice = false;         // the scheduler gave the thread its short slice
		uint64_t cpu_ns = 0;              // the thread's CPU time, at its last read
		int nice = 0;                     // the thread's niceness (at stop(), once stopped)
	};

	// `inner` must outlive the reader; nothing else reads it.
	RingReader(RecordSource &inner, Options o);
	RingReader(const RingReader &) = delete;
	RingReader &operator=(const RingReader &) = delete;
	~RingReader() override;

	// The thread starts reading; stop() ends it (and the destructor), after
	// which consume() still reads the rings itself. Returns once the thread
	// runs (tid() is known).
	Result<void> start();
	void stop();

	int fd() const override { return ready_.get(); }
	Result<int> consume(Records &to) override;
	uint64_t reading_cpu_ns() const override;
	Stats stats() const;
	// The thread's id, once start() has returned (0 before). It keeps the
	// niceness eacgm started at when the rest of eacgm yields to the job
	// (lower_priority's `keep`): the thread only copies what the rings hold,
	// and waiting behind the job's threads for a CPU is what fills them.
	pid_t tid() const;

private:
	class Appender;
	void run();
	// One read of the rings, into a buffer of the caller's (no lock held).
	Result<int> read_into(Words &buf, uint64_t &records);
	// Moves a read's records to the queue (the lock held).
	void publish(Words &buf, uint64_t records);
	static void replay(const Words &q, Records &to);

	RecordSource &inner_;
	Options o_;
	UniqueFd ready_; // eventfd: records queued
	UniqueFd wake_;  // eventfd: a read asked for, or stop()
	std::thread thread_;
	mutable std::mutex mu_; // everything below
	std::condition_variable cv_;
	std::vector<Words> queue_; // each read's tagged records
	std::vector<Words> spare_; // handed over, for the thread's next reads
	uint64_t queued_words_ = 0, queued_records_ = 0;
	uint64_t asked_ = 0, answered_ = 0; // reads consume() asked for, and the last one made
	Stats stats_;
	bool stopping_ = false;
	pid_t tid_ = 0;       // set by the thread as it starts
	Result<void> failed_; // a read on the thread failed: said at the next consume
};

} // namespace eacgm
