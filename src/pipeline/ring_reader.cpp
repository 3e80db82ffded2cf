// SPDX-License-Identifier: Apache-2.0
#include "pipeline/ring_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <cstdio>
#include <cstdlib>

#include "common/clock.h"
#include "common/threads.h"

namespace eacgm {

// A queued record: one header word (kind, frames, payload bytes), then the
// record's bytes padded to whole words, so that each lies 8-aligned.
namespace {
enum Kind : uint64_t { kSpan = 1, kProc = 2, kPy = 3 };

uint64_t header(Kind kind, uint32_t nframes, size_t bytes)
{
	return uint64_t(kind) | uint64_t(nframes & 0xffffff) << 8 | uint64_t(bytes) << 32;
}

size_t words(size_t bytes) { return (bytes + 7) / 8; }

// Read in place from the words (replay): none needs more than 8-alignment.
static_assert(alignof(eacgm_span_event) <= 8 && alignof(eacgm_proc_event) <= 8 && alignof(eacgm_py_stack_event) <= 8);

void notify(int fd)
{
	uint64_t one = 1;
	(void)!write(fd, &one, sizeof one);
}
} // namespace

uint64_t *Words::append(size_t n)
{
	if (size_ + n > cap_) {
		size_t cap = std::max<size_t>({cap_ * 2, size_ + n, 4096});
		std::unique_ptr<uint64_t[]> p(new uint64_t[cap]); // not zeroed
		if (size_)
			memcpy(p.get(), p_.get(), size_ * 8);
		p_ = std::move(p);
		cap_ = cap;
	}
	uint64_t *at = p_.get() + size_;
	size_ += n;
	return at;
}

class RingReader::Appender : public Records {
public:
	explicit Appender(Words &q) : q_(q) {}
	void span(const eacgm_span_event &e) override { put(kSpan, 0, &e, sizeof e); }
	void proc(const eacgm_proc_event &e) override { put(kProc, 0, &e, sizeof e); }
	void py(const eacgm_py_stack_event &e, uint32_t nframes) override
	{
		put(kPy, nframes, &e, offsetof(eacgm_py_stack_event, frames) + nframes * sizeof(eacgm_py_frame));
	}
	uint64_t records = 0;

private:
	void put(Kind kind, uint32_t nframes, const void *data, size_t bytes)
	{
		uint64_t *at = q_.append(1 + words(bytes));
		at[0] = header(kind, nframes, bytes);
		memcpy(at + 1, data, bytes);
		records++;
	}
	Words &q_;
};

RingReader::RingReader(RecordSource &inner, Options o)
	: inner_(inner), o_(o), ready_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
	  wake_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK))
{}

RingReader::~RingReader() { stop(); }

Result<void> RingReader::start()
{
	if (!ready_ || !wake_)
		return errno_error(errno, "cannot make the ring reader's eventfds");
	try {
		thread_ = std::thread([this] { run(); });
	} catch (const std::system_error &e) {
		return errno_error(e.code().value(), "cannot start the ring-draining thread");
	}
	std::unique_lock<std::mutex> l(mu_);
	cv_.wait(l, [this] { return tid_ != 0; });
	return {};
}

pid_t RingReader::tid() const
{
	std::lock_guard<std::mutex> l(mu_);
	return tid_;
}

void RingReader::stop()
{
	if (!thread_.joinable())
		return;
	{
		std::lock_guard<std::mutex> l(mu_);
		stats_.nice = getpriority(PRIO_PROCESS, static_cast<id_t>(tid_)); // while it lives
		stopping_ = true;
	}
	cv_.notify_all();
	notify(wake_.get());
	thread_.join();
}

Result<int> RingReader::read_into(Words &buf, uint64_t &records)
{
	Appender a(buf);
	auto n = inner_.consume(a);
	records = a.records;
	return n;
}

void RingReader::publish(Words &buf, uint64_t records)
{
	if (buf.empty())
		return;
	queued_words_ += buf.size();
	queued_records_ += records;
	stats_.max_queued_bytes = std::max<uint64_t>(stats_.max_queued_bytes, queued_words_ * 8);
	queue_.push_back(std::move(buf));
	buf = Words();
	if (!spare_.empty()) {
		buf = std::move(spare_.back());
		spare_.pop_back();
	}
}

// The thread asks the scheduler for a short slice (100 us; the kernel's
// default is 3 ms): EEVDF (Linux 6.6 and later; 6.12 takes a slice per
// thread) picks the eligible thread whose slice ends first, and lets one
// with a shorter slice preempt, so the thread runs within microseconds of a
// wakeup, and it needs far less than its slice each time. It needs no
// privilege and takes no more CPU than before. Measured on the 2-CPU VM
// (test_discovery's storm: one thread calling 100,000 times a second, 25
// Python processes starting at a time, a 256 KiB span ring): with the
// default slice the ring lost 1,500-2,500 records a run (the thread waiting
// for a CPU, as 0580e50's single thread did), with this one none.
// At `nice` (Options::nice: the niceness eacgm started at), where it may
// set that one (RLIMIT_NICE, app/privileges.h), else at its own: at eacgm's
// --nice of 10 beside eight Python processes starting at once (niceness 0),
// its slice alone still left it waiting longer than a 256 KiB ring lasts,
// 0 to 2,399 records a run lost; at 0, none in 10 runs.
static bool short_slice(int want_nice)
{
	struct {
		uint32_t size, sched_policy;
		uint64_t sched_flags;
		int32_t sched_nice;
		uint32_t sched_priority;
		uint64_t sched_runtime, sched_deadline, sched_period;
		uint32_t sched_util_min, sched_util_max;
	} attr{};
	attr.size = sizeof attr;
	attr.sched_policy = SCHED_OTHER;
	attr.sched_nice = want_nice;
	attr.sched_runtime = 100'000; // ns
	if (syscall(SYS_sched_setattr, 0, &attr, 0) == 0)
		return true;
	errno = 0;
	const int nice = getpriority(PRIO_PROCESS, 0);
	if (errno != 0)
		return false;
	attr.sched_nice = nice; // the slice at least
	return syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
}

// Wakes when a ring does (the BPF side wakes at a quarter full, the process
// ring at each record) or consume() asks, reads without the lock, and
// queues what it read. It never waits for anything but the rings, the
// queue's room and the lock's few instructions.
void RingReader::run()
{
	mark_draining_thread();
	// Named for top -H, ps -L and the tests: the one thread of eacgm's that
	// keeps the niceness it started at (short_slice).
	(void)prctl(PR_SET_NAME, "eacgm-rings");
	{
		bool ok = short_slice(o_.nice);
		std::lock_guard<std::mutex> l(mu_);
		stats_.short_slice = ok;
		tid_ = gettid();
	}
	cv_.notify_all();
	pollfd fds[2] = {{inner_.fd(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
	Words buf;
	for (;;) {
		if (::poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		uint64_t woke = mono_ns(), v;
		(void)!read(wake_.get(), &v, sizeof v);
		uint64_t asked, asked_before;
		{
			std::unique_lock<std::mutex> l(mu_);
			// Full: left unread (the rings fill, the BPF side counts
			// what it cannot write) until the pipeline takes the queue,
			// which a read it asks for is answered at once to let it do.
			while (!stopping_ && queued_words_ * 8 >= o_.max_queued_bytes && asked_ == answered_) {
				stats_.full_waits++;
				cv_.wait(l);
			}
			if (stopping_)
				return;
			asked_before = answered_;
			asked = asked_;
			if (queued_words_ * 8 >= o_.max_queued_bytes) {
				answered_ = asked;
				l.unlock();
				cv_.notify_all();
				continue;
			}
		}
		uint64_t records = 0;
		auto n = read_into(buf, records);
		const uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		{
			std::lock_guard<std::mutex> l(mu_);
			publish(buf, records);
			answered_ = asked;
			stats_.rounds++;
			stats_.records += records;
			stats_.max_wake_to_read_ns = std::max(stats_.max_wake_to_read_ns, mono_ns() - woke);
			stats_.cpu_ns = cpu;
			if (!n)
				failed_ = n.error();
		}
		cv_.notify_all();
		// A read consume() asked for is taken by it at once: signalled,
		// it would wake the pipeline for another round, which would ask
		// again, and the two threads would take turns for ever.
		if ((records && asked == asked_before) || !n)
			notify(ready_.get());
		if (!n)
			return;
	}
}

Result<int> RingReader::consume(Records &to)
{
	std::vector<Words> q;
	uint64_t n = 0, v = 0;
	// Taken now: what comes later signals again. Signalled, the thread has
	// read since the last take, and that is this round (one more read here
	// would make a round of everything up to now: the exec, the calls and
	// the exit of a short process, which then exited before it was judged).
	bool signalled = read(ready_.get(), &v, sizeof v) == sizeof v && v > 0;
	if (!thread_.joinable()) {
		// Stopped (or never started): the rings are read here.
		Words buf;
		uint64_t records = 0;
		if (auto r = read_into(buf, records); !r)
			return r.error();
		std::lock_guard<std::mutex> l(mu_);
		publish(buf, records);
	} else if (!signalled) {
		// Woken by something else (a pidfd, a timeout): what the rings
		// hold now is read first, the exit record a pidfd's wakeup expects.
		std::unique_lock<std::mutex> l(mu_);
		uint64_t want = ++asked_;
		l.unlock();
		cv_.notify_all(); // a thread waiting for room answers at once
		notify(wake_.get());
		l.lock();
		cv_.wait(l, [&] { return answered_ >= want || !failed_; });
	}
	{
		std::lock_guard<std::mutex> l(mu_);
		if (!failed_)
			return failed_.error();
		q.swap(queue_);
		n = std::exchange(queued_records_, 0);
		queued_words_ = 0;
	}
	cv_.notify_all();
	for (const auto &chunk : q)
		replay(chunk, to);
	// Kept for the thread's next reads: a few, each as large as a read.
	std::lock_guard<std::mutex> l(mu_);
	for (auto &chunk : q)
		if (spare_.size() < 4) {
			chunk.clear();
			spare_.push_back(std::move(chunk));
		}
	return static_cast<int>(n);
}

// Each record is read in place: 8-aligned, as in the ring itself.
void RingReader::replay(const Words &q, Records &to)
{
	const uint64_t *w = q.data();
	for (size_t i = 0; i < q.size();) {
		uint64_t h = w[i];
		auto kind = Kind(h & 0xff);
		auto nframes = uint32_t(h >> 8 & 0xffffff);
		size_t bytes = h >> 32;
		const void *p = &w[i + 1];
		if (kind == kSpan)
			to.span(*static_cast<const eacgm_span_event *>(p));
		else if (kind == kProc)
			to.proc(*static_cast<const eacgm_proc_event *>(p));
		else
			to.py(*static_cast<const eacgm_py_stack_event *>(p), nframes);
		i += 1 + words(bytes);
	}
}

uint64_t RingReader::reading_cpu_ns() const { return stats().cpu_ns; }

RingReader::Stats RingReader::stats() const
{
	std::lock_guard<std::mutex> l(mu_);
	Stats s = stats_;
	if (!stopping_ && tid_) // asked of the kernel, not read by the thread at every round
		s.nice = getpriority(PRIO_PROCESS, static_cast<id_t>(tid_));
	return s;
}

} // namespace eacgm
