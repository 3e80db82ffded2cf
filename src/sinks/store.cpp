// SPDX-License-Identifier: Apache-2.0
#include "sinks/store.h"

#include <algorithm>

namespace eacgm {

Result<void> StoreSink::write(SpanBatch &b)
{
	if (auto r = w_.add_spans(b.spans, b.typed); !r)
		return r;
	if (!b.anomalies.empty())
		if (auto r = w_.add_anomalies(b.anomalies); !r)
			return r;
	uint64_t now = b.spans.empty() ? 0 : b.spans.back().start_ns;
	if (!b.typed.empty())
		now = std::max(now, b.typed.spans.back().start_ns);
	return keep_bounds(now);
}

Result<void> StoreSink::measures(const std::vector<Metric> &m, const std::vector<Event> &e)
{
	if (auto r = w_.add_metrics(m); !r)
		return r;
	if (auto r = w_.add_events(e); !r)
		return r;
	return keep_bounds(m.empty() ? 0 : m.back().ts_ns);
}

// now_ns: the newest time written (0: none); ages count back from it.
Result<void> StoreSink::keep_bounds(uint64_t now_ns)
{
	StoreWriter::Retention due;
	// The file never shrinks (freed pages are reused): it is looked at once
	// a second of data, not at every batch, and trimmed once past 70%.
	if (retention_.max_bytes && now_ns >= last_size_check_ns_ + 1'000'000'000ull) {
		last_size_check_ns_ = now_ns;
		// An open transaction's pages are partly in SQLite's cache, not
		// yet in the file: committed first, the file says all it holds.
		if (auto r = w_.commit(); !r)
			return r;
		if (w_.file_bytes() > retention_.max_bytes * 0.7)
			due.max_bytes = retention_.max_bytes;
	}
	if (retention_.max_age_ns && now_ns > last_age_check_ns_ + 60'000'000'000ull) {
		last_age_check_ns_ = now_ns;
		due.max_age_ns = retention_.max_age_ns;
	}
	if (!due.max_bytes && !due.max_age_ns)
		return {};
	auto n = w_.enforce(due, now_ns);
	if (!n)
		return n.error();
	expired_ += *n;
	return {};
}

} // namespace eacgm
