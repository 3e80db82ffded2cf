// SPDX-License-Identifier: Apache-2.0
// Writes a Recording through a StoreWriter the way a recording does, for
// the tests that read one back.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "store/store.h"

namespace eacgm::test {

// Processes and threads are upserted twice (a first row, then the one that
// must win), the spans go in the batches given (a record loop's arrive out of
// order), empty batches and replaced drops included.
inline void write_recording(const Recording &rec, const std::string &path,
			    const std::vector<std::vector<Span>> &batches)
{
	auto w = StoreWriter::create(path);
	ASSERT_TRUE(w.ok()) << w.error().message;
	StoreWriter writer = std::move(w).value();
	for (const auto &[k, v] : rec.meta)
		ASSERT_TRUE(writer.set_meta(k, v).ok());
	ASSERT_TRUE(writer.set_wall_offset(rec.wall_offset_ns).ok());
	for (Process p : rec.processes) {
		Process early = p;
		early.end_ns = 0;
		early.exit_code = -1;
		ASSERT_TRUE(writer.upsert_process(early).ok());
		ASSERT_TRUE(writer.upsert_process(p).ok());
	}
	for (const Thread &t : rec.threads) {
		ASSERT_TRUE(writer.upsert_thread({t.pid, t.tid, "old name"}).ok());
		ASSERT_TRUE(writer.upsert_thread(t).ok());
	}
	for (const std::vector<Span> &batch : batches)
		ASSERT_TRUE(writer.add_spans(batch).ok());
	ASSERT_TRUE(writer.add_spans({}).ok());
	ASSERT_TRUE(writer.add_metrics(rec.metrics).ok());
	ASSERT_TRUE(writer.add_metrics({}).ok());
	ASSERT_TRUE(writer.add_events(rec.events).ok());
	ASSERT_TRUE(writer.add_anomalies(rec.anomalies).ok());
	ASSERT_TRUE(writer.set_drops({{"cuda", "ringbuf_full", 1}}).ok());
	ASSERT_TRUE(writer.set_drops(rec.drops).ok());
	auto f = writer.finish();
	ASSERT_TRUE(f.ok()) << f.error().message;
}

} // namespace eacgm::test
