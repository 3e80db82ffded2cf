// SPDX-License-Identifier: Apache-2.0
// The ring-draining thread (pipeline/ring_reader.h) against a source of
// fake records: everything read reaches consume() once, in order; consume()
// has the thread read once more; a full queue leaves the rings unread and
// loses nothing; slow work on the thread is counted (common/threads.h).
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <vector>

#include "common/threads.h"
#include "pipeline/ring_reader.h"

namespace eacgm {
namespace {

// A record as a test writes it: which callback, and its one distinct field.
struct Rec {
	char kind; // 's', 'p', 'y'
	uint64_t value;
	uint32_t nframes = 0;
	bool operator==(const Rec &o) const { return kind == o.kind && value == o.value && nframes == o.nframes; }
};

// A source whose fd wakes the reader when told; records wait until read.
class FakeSource : public RecordSource {
public:
	FakeSource() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
	int fd() const override { return fd_.get(); }
	void add(Rec r, bool wake = true)
	{
		{
			std::lock_guard<std::mutex> l(mu_);
			waiting_.push_back(r);
		}
		uint64_t one = 1;
		if (wake)
			(void)!write(fd_.get(), &one, sizeof one);
	}
	Result<int> consume(Records &to) override
	{
		uint64_t v;
		(void)!read(fd_.get(), &v, sizeof v);
		if (slow_)
			slow_work("a test's slow source");
		std::vector<Rec> got;
		{
			std::lock_guard<std::mutex> l(mu_);
			got.swap(waiting_);
		}
		for (const Rec &r : got)
			hand(r, to);
		return int(got.size());
	}
	bool slow_ = false;

private:
	static void hand(const Rec &r, Records &to)
	{
		if (r.kind == 's') {
			eacgm_span_event e{};
			e.start_ns = r.value;
			to.span(e);
		} else if (r.kind == 'p') {
			eacgm_proc_event e{};
			e.ts_ns = r.value;
			to.proc(e);
		} else {
			std::vector<uint64_t> buf(sizeof(eacgm_py_stack_event) / 8 + 1);
			auto *e = reinterpret_cast<eacgm_py_stack_event *>(buf.data());
			e->ts_ns = r.value;
			e->nframes = r.nframes;
			for (uint32_t i = 0; i < r.nframes; i++)
				e->frames[i].code = r.value * 100 + i;
			to.py(*e, r.nframes);
		}
	}
	UniqueFd fd_;
	std::mutex mu_;
	std::vector<Rec> waiting_;
};

// Takes what consume() hands over, checking the Python frames on the way.
struct Taken : Records {
	void span(const eacgm_span_event &e) override { got.push_back({'s', e.start_ns}); }
	void proc(const eacgm_proc_event &e) override { got.push_back({'p', e.ts_ns}); }
	void py(const eacgm_py_stack_event &e, uint32_t n) override
	{
		for (uint32_t i = 0; i < n; i++)
			EXPECT_EQ(e.frames[i].code, e.ts_ns * 100 + i);
		got.push_back({'y', e.ts_ns, n});
	}
	std::vector<Rec> got;
};

std::vector<Rec> some_records(int n)
{
	std::vector<Rec> out;
	for (int i = 0; i < n; i++)
		out.push_back(i % 3 == 0           ? Rec{'s', uint64_t(i)}
				      : i % 3 == 1 ? Rec{'p', uint64_t(i)}
						   : Rec{'y', uint64_t(i), uint32_t(i % 5)});
	return out;
}

// Until the thread has read `n` records (it reads when the source wakes it).
void wait_read(const RingReader &r, uint64_t n)
{
	while (r.stats().records < n)
		usleep(100);
}

TEST(RingReader, EveryRecordReachesConsumeOnceInOrder)
{
	FakeSource src;
	RingReader reader(src, {});
	ASSERT_TRUE(reader.start());
	auto want = some_records(300);
	Taken taken;
	for (size_t i = 0; i < want.size(); i++) {
		src.add(want[i]);
		if (i % 50 == 49) {
			ASSERT_TRUE(reader.consume(taken));
		}
	}
	wait_read(reader, want.size());
	ASSERT_TRUE(reader.consume(taken));
	EXPECT_EQ(taken.got, want);
	EXPECT_EQ(reader.stats().records, want.size()); // every read is the thread's, asked or woken
}

TEST(RingReader, ARoundIsWhatTheThreadReadSinceTheLast)
{
	FakeSource src;
	RingReader reader(src, {});
	ASSERT_TRUE(reader.start());
	src.add({'p', 1}); // an exec record: read at once
	wait_read(reader, 1);
	src.add({'s', 2}, false); // its calls and exit, later
	Taken taken;
	ASSERT_TRUE(reader.consume(taken)); // woken by the thread's read: that read only
	EXPECT_EQ(taken.got, (std::vector<Rec>{{'p', 1}}));
	ASSERT_TRUE(reader.consume(taken)); // not woken by it (a timeout): it reads first
	EXPECT_EQ(taken.got, (std::vector<Rec>{{'p', 1}, {'s', 2}}));
}

TEST(RingReader, ConsumeHasTheThreadReadWhatIsThereNow)
{
	FakeSource src;
	RingReader reader(src, {});
	ASSERT_TRUE(reader.start());
	// Not woken: only consume's own ask reads them (a process's exit
	// record the pidfd's wakeup expects: the pipeline was woken by it).
	src.add({'p', 7}, false);
	src.add({'s', 8}, false);
	Taken taken;
	auto n = reader.consume(taken);
	ASSERT_TRUE(n);
	EXPECT_EQ(*n, 2);
	EXPECT_EQ(taken.got, (std::vector<Rec>{{'p', 7}, {'s', 8}}));
	EXPECT_EQ(reader.stats().rounds, 1u);
}

TEST(RingReader, WakesThePipelineWhenItReadsButNotForItsOwnAsk)
{
	FakeSource src;
	RingReader reader(src, {});
	ASSERT_TRUE(reader.start());
	src.add({'s', 1});
	wait_read(reader, 1);
	pollfd p{reader.fd(), POLLIN, 0};
	ASSERT_EQ(poll(&p, 1, 10000), 1); // the thread's read signals
	Taken taken;
	ASSERT_TRUE(reader.consume(taken));
	src.add({'s', 2}, false);
	ASSERT_TRUE(reader.consume(taken)); // its ask is answered, not signalled
	EXPECT_EQ(poll(&p, 1, 0), 0);
	EXPECT_EQ(taken.got, (std::vector<Rec>{{'s', 1}, {'s', 2}}));
}

TEST(RingReader, AFullQueueLeavesTheRingsUnreadAndLosesNothing)
{
	FakeSource src;
	// Room for about one span record: the second waits in the source.
	RingReader reader(src, {.max_queued_bytes = sizeof(eacgm_span_event)});
	ASSERT_TRUE(reader.start());
	src.add({'s', 1});
	wait_read(reader, 1);
	src.add({'s', 2});
	while (reader.stats().full_waits == 0)
		usleep(100);
	EXPECT_EQ(reader.stats().records, 1u);
	Taken taken;
	ASSERT_TRUE(reader.consume(taken)); // takes the queue; its ask is answered
	ASSERT_TRUE(reader.consume(taken));
	EXPECT_EQ(taken.got, (std::vector<Rec>{{'s', 1}, {'s', 2}}));
}

TEST(RingReader, StoppedItIsReadByConsumeItself)
{
	FakeSource src;
	RingReader reader(src, {});
	ASSERT_TRUE(reader.start());
	reader.stop();
	src.add({'s', 5});
	Taken taken;
	ASSERT_TRUE(reader.consume(taken));
	EXPECT_EQ(taken.got, (std::vector<Rec>{{'s', 5}}));
	EXPECT_EQ(reader.stats().rounds, 0u);
}

TEST(RingReader, SlowWorkOnTheDrainingThreadIsCounted)
{
	uint64_t before = slow_work_on_drain();
	slow_work("on the test's own thread"); // not the draining thread: not counted
	EXPECT_EQ(slow_work_on_drain(), before);
	FakeSource src;
	src.slow_ = true;
	RingReader reader(src, {});
	ASSERT_TRUE(reader.start());
	src.add({'s', 1});
	wait_read(reader, 1);
	reader.stop();
	EXPECT_EQ(slow_work_on_drain(), before + 1);
	EXPECT_STREQ(last_slow_work_on_drain(), "a test's slow source");
}

} // namespace
} // namespace eacgm
